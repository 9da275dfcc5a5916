"""Launches beyond the plan: NodeClaims created again for pods that already had one.

A provisioning round plans each pending pod onto a NodeClaim and writes the plan on the
NodeClaim it creates (``karpenter.cluster.x-k8s.io/nominated-pods``, the pods it was launched
for). The pods' ``Nominated`` Events say the same to users, but as upstream they pass a shared
rate limiter (10 at once, 5 a second) and most of a big round's are dropped, so they are not
where the plan is read. kube-scheduler does not follow that plan: it places pods by its own
scores as nodes become Ready, so small pods created first can fill the node meant for a big
one. The big pod is then pending with its NodeClaim still alive, and the next round launches
another NodeClaim for it. That second launch is the cost of a plan reality did not realize,
and it is what this module counts.

A pod is *stranded* when it is nominated to a NodeClaim while a NodeClaim it was nominated to
before is still alive and not being deleted. The NodeClaim of that later nomination counts as
*launched beyond the plan* (once, however many stranded pods it was created for). A pod whose
earlier NodeClaim was deleted or is being deleted (a failed launch), is marked for disruption
(``DisruptionReason``: its replacements are created for its pods), or whose machine the cloud
has announced it will take (``karpenter.cluster.x-k8s.io/interruption``: its pods are planned on
a replacement before the drain), is planned again, not stranded.

Deciding "still alive" needs the order of NodeClaim changes between two samples, so the
follower watches them from the start of the run and replays them by resourceVersion. When the
watch history has expired (410), it relists the NodeClaims and carries on; plans written on
NodeClaims created and gone in between are not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.api.wellknown import ANNOTATION_INTERRUPTION, ANNOTATION_NOMINATED_PODS
from karpenter_capi.core.kube.resources import NODECLAIMS, Resource
from karpenter_capi.sim.apiserver.request_counts import WATCH_POLL

if TYPE_CHECKING:
    from karpenter_capi.sim.apiserver import InMemoryAPIServer

__all__ = ["BeyondPlan", "PlanFollower"]


def _going(claim: Mapping[str, Any]) -> bool:
    """Whether a NodeClaim is on its way out: being deleted, its machine interrupted, or marked
    by disruption (``DisruptionReason``), whose replacements are launched for its pods."""
    metadata = claim.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if metadata.get("deletionTimestamp") or ANNOTATION_INTERRUPTION in annotations:
        return True
    return any(
        c.get("type") == NodeClaimConditionType.DISRUPTION_REASON and c.get("status") == "True"
        for c in (claim.get("status") or {}).get("conditions") or []
    )


@dataclass(frozen=True)
class BeyondPlan:
    """What a run launched beyond its plans (see the module docstring)."""

    nodeclaims_beyond_plan: int = 0
    pods_stranded: int = 0


@dataclass
class _Pending:
    """Watch events read from one resource and not yet replayed, with the resume point."""

    resource: Resource
    version: str
    events: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)


class PlanFollower:
    """Follows NodeClaims through a run and counts launches beyond the plan."""

    def __init__(self, server: InMemoryAPIServer, count: Callable[[str], None]) -> None:
        self.server = server
        self._count = count  # the observer's tally of its own requests
        start = server.resource_version
        self._stream = _Pending(NODECLAIMS, start)
        self._claims: dict[str, bool] = {}  # NodeClaim name -> being deleted
        self._created: dict[str, int] = {}  # NodeClaim name -> resourceVersion first seen at
        self._nominations: dict[str, list[tuple[str, int]]] = {}  # pod key -> (NodeClaim, rv)
        self._stranded: set[str] = set()
        self._beyond: set[str] = set()

    def result(self) -> BeyondPlan:
        return BeyondPlan(len(self._beyond), len(self._stranded))

    def follow(self) -> None:
        """Replay, in resourceVersion order, what changed since the last call."""
        upto = int(self.server.resource_version)
        if not self._drain(self._stream, upto):
            self._relist()
            return
        for version, _, obj in self._stream.events:
            self._claim_changed(obj, version)
        self._stream.events = []

    def _drain(self, stream: _Pending, upto: int) -> bool:
        """Read ``stream``'s events up to ``upto``; ``False`` when its history has expired."""
        self._count(WATCH_POLL)
        watch = self.server.watch(
            stream.resource,
            resource_version=stream.version,
            allow_bookmarks=True,
            timeout_seconds=0,
        )
        try:
            for event in watch:
                if event.type == "ERROR":
                    return False
                version = int(event.resource_version or 0)
                if event.type == "BOOKMARK" or version > upto:
                    continue  # a later write is read on the next call, in order
                obj = dict(event.object)
                if event.type == "DELETED":
                    obj = {**obj, "_deleted": True}
                stream.events.append((version, stream.resource.kind, obj))
        finally:
            watch.close()
        stream.version = str(upto)
        return True

    def _relist(self) -> None:
        self._count("list")
        listed = self.server.list(NODECLAIMS)
        self._claims = {str(c["metadata"]["name"]): _going(c) for c in listed.items}
        self._stream.version = listed.resource_version
        self._stream.events = []

    def _claim_changed(self, claim: Mapping[str, Any], version: int) -> None:
        meta = claim.get("metadata") or {}
        name = str(meta.get("name"))
        if claim.get("_deleted"):
            self._claims.pop(name, None)
            self._created.pop(name, None)
            return
        self._claims[name] = _going(claim)
        created = self._created.setdefault(name, version)
        planned = (meta.get("annotations") or {}).get(ANNOTATION_NOMINATED_PODS) or ""
        for pod in planned.split(","):
            if pod:
                self._planned(pod, name, created)

    def _planned(self, pod: str, claim: str, version: int) -> None:
        """``pod`` planned onto ``claim`` (created at ``version``)."""
        earlier = self._nominations.setdefault(pod, [])
        if any(name == claim for name, _ in earlier):
            return  # the same plan, seen again on a later change of the NodeClaim
        alive = [at for name, at in earlier if self._claims.get(name) is False]
        if alive:
            self._stranded.add(pod)
            if version > min(alive):
                self._beyond.add(claim)
        earlier.append((claim, version))
