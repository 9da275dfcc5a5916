"""Launches beyond the plan: NodeClaims created again for pods that already had one.

A provisioning round plans each pending pod onto a NodeClaim and says so with a ``Nominated``
Event on the pod (``Pod should schedule on: nodeclaim/NAME``). kube-scheduler does not follow
that plan: it places pods by its own scores as nodes become Ready, so small pods created first
can fill the node meant for a big one. The big pod is then pending with its NodeClaim still
alive, and the next round launches another NodeClaim for it. That second launch is the cost of
a plan reality did not realize, and it is what this module counts.

A pod is *stranded* when it is nominated to a NodeClaim while a NodeClaim it was nominated to
before is still alive and not being deleted. The NodeClaim of that later nomination counts as
*launched beyond the plan* (once, however many stranded pods it was created for) when it was
created after the pod's earlier nomination: today the provisioner nominates pods only onto the
NodeClaims it has just created, but a pod re-planned onto a NodeClaim that already stood for
other pods would be stranded without a launch of its own. A pod whose earlier NodeClaim was
deleted or is being deleted (a failed launch, a disruption), or whose machine the cloud has
announced it will take (``karpenter.cluster.x-k8s.io/interruption``: its pods are planned on a
replacement before the drain), is planned again, not stranded.

Deciding "still alive" needs the order of NodeClaim changes and Events between two samples, so
the follower watches both from the start of the run and replays them merged by
resourceVersion (one counter across the in-memory API server's resources, as in etcd). When
the watch history has expired (410), it relists the NodeClaims and carries on; Events lost
that way are not counted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from karpenter_capi.core.api.wellknown import ANNOTATION_INTERRUPTION
from karpenter_capi.core.kube.resources import EVENTS, NODECLAIMS, Resource
from karpenter_capi.sim.apiserver.request_counts import WATCH_POLL

if TYPE_CHECKING:
    from karpenter_capi.sim.apiserver import InMemoryAPIServer

__all__ = ["BeyondPlan", "PlanFollower"]

NOMINATED: Final = "Nominated"
_NODECLAIM_IN_MESSAGE: Final = re.compile(r"nodeclaim/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)")


def _going(metadata: Mapping[str, Any]) -> bool:
    """Whether a NodeClaim is on its way out: being deleted, or its machine interrupted."""
    annotations = metadata.get("annotations") or {}
    return bool(metadata.get("deletionTimestamp")) or ANNOTATION_INTERRUPTION in annotations


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


def nominated_nodeclaim(event: Mapping[str, Any]) -> tuple[str, str] | None:
    """(pod uid, NodeClaim name) of a ``Nominated`` Event, or ``None`` for any other Event."""
    if event.get("reason") != NOMINATED:
        return None
    involved = event.get("involvedObject") or event.get("regarding") or {}
    if involved.get("kind") not in (None, "", "Pod"):
        return None
    message = str(event.get("message") or event.get("note") or "")
    found = _NODECLAIM_IN_MESSAGE.search(message)
    uid = str(involved.get("uid") or f"{involved.get('namespace')}/{involved.get('name')}")
    return (uid, found.group(1)) if found else None


class PlanFollower:
    """Follows NodeClaims and Events through a run and counts launches beyond the plan."""

    def __init__(self, server: InMemoryAPIServer, count: Callable[[str], None]) -> None:
        self.server = server
        self._count = count  # the observer's tally of its own requests
        start = server.resource_version
        self._streams = [_Pending(NODECLAIMS, start), _Pending(EVENTS, start)]
        self._claims: dict[str, bool] = {}  # NodeClaim name -> being deleted
        self._created: dict[str, int] = {}  # NodeClaim name -> resourceVersion first seen at
        self._nominations: dict[str, list[tuple[str, int]]] = {}  # pod uid -> (NodeClaim, rv)
        self._stranded: set[str] = set()
        self._beyond: set[str] = set()

    def result(self) -> BeyondPlan:
        return BeyondPlan(len(self._beyond), len(self._stranded))

    def follow(self) -> None:
        """Replay, in resourceVersion order, what changed since the last call."""
        upto = int(self.server.resource_version)
        merged: list[tuple[int, str, dict[str, Any]]] = []
        for stream in self._streams:
            if not self._drain(stream, upto):
                self._relist()
                return
            merged.extend(stream.events)
            stream.events = []
        merged.sort(key=lambda e: e[0])
        for version, kind, obj in merged:
            if kind == NODECLAIMS.kind:
                self._claim_changed(obj, version)
            else:
                self._event_seen(obj, version)

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
        self._claims = {str(c["metadata"]["name"]): _going(c["metadata"]) for c in listed.items}
        for stream in self._streams:
            stream.version = listed.resource_version
            stream.events = []

    def _claim_changed(self, claim: Mapping[str, Any], version: int) -> None:
        meta = claim.get("metadata") or {}
        name = str(meta.get("name"))
        if claim.get("_deleted"):
            self._claims.pop(name, None)
            self._created.pop(name, None)
        else:
            self._claims[name] = _going(meta)
            self._created.setdefault(name, version)

    def _event_seen(self, event: Mapping[str, Any], version: int) -> None:
        nominated = nominated_nodeclaim(event)
        if nominated is None or event.get("_deleted"):
            return
        pod, claim = nominated
        earlier = self._nominations.setdefault(pod, [])
        if any(name == claim for name, _ in earlier):
            return  # the same plan again (a repeated Event bumps its count)
        alive = [at for name, at in earlier if self._claims.get(name) is False]
        if alive:
            self._stranded.add(pod)
            # Unknown creation (seen only after a relist): counted, as a new NodeClaim is.
            if self._created.get(claim, version) > min(alive):
                self._beyond.add(claim)
        earlier.append((claim, version))
