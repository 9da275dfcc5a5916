"""A simulated cloud's spot interruptions, and what they cost the workloads.

An ``interrupt`` action does to Nodes what EC2 and aws-node-termination-handler do to a spot
instance: the handler's IMDS monitor sees the two-minute notice and taints the Node
``aws-node-termination-handler/spot-itn`` (its ``pkg/node/node.go: TaintSpotItn``), which the
controller's generic path reads (``core.interruption.signals``); so the scenario runs with
``generic_capi`` and no queue. With ``via: queue`` it does what EC2 and EventBridge do instead:
a spot interruption warning per instance on the scenario's SQS queue (moto's), which ``capa``
consumes (``plugins.capa.interruption``); the figures then say how many messages are left on
the queue (the goal is none: each one deleted once acted on). At the deadline the cloud takes
the instance: if its Node is still there, that is recorded and the pods still bound to it are
deleted, as a terminated instance's are.

``figures`` is what the summary reports: for each interrupted Node its notice and deadline,
whether it was gone (drained, its machine deleted) before the deadline, and when its
replacement was Ready; and the pods that had no place to go for longer than the replacement's
boot time: pods created after a notice (the moved ones, recreated by their Deployments) that
waited longer to be bound than the quickest replacement took from its NodeClaim to a Ready
Node (the goal is none).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import Clock, parse_timestamp
from karpenter_capi.core.kube.errors import ApiError, NotFound
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES, PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.scenario.observer import bound_after
from karpenter_capi.sim.scenario.schema import DEFAULT_NOTICE, TimelineAction

RECLAIM: Final = "reclaim"
"""The runner's event for an interruption's deadline."""
NTH_SPOT_TAINT: Final = {
    "key": "aws-node-termination-handler/spot-itn",
    "value": "spot-itn-simulated",
    "effect": "NoSchedule",
}


@dataclass
class Interrupted:
    node: str
    noticed: datetime
    deadline: datetime
    there_at_deadline: bool | None = None


def _ready_at(node: Mapping[str, Any]) -> datetime | None:
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            stamp = condition.get("lastTransitionTime")
            return parse_timestamp(stamp) if stamp else None
    return None


@dataclass(frozen=True)
class Queue:
    """Where ``via: queue`` notices go (``sim.scenario.aws.SimAws``'s SQS queue)."""

    send: Callable[[str, str, datetime], None]
    """(instance ID, zone, when): one spot interruption warning on the queue."""
    depth: Callable[[], int]
    """Messages on the queue, received or not."""


class Interruptions:
    """The interruptions of one run, and the measures taken of them."""

    def __init__(self, server: InMemoryAPIServer, clock: Clock, queue: Queue | None = None) -> None:
        self._server = server
        self._clock = clock
        self._queue = queue
        self._queued = False
        self.interrupted: list[Interrupted] = []
        self._ready: dict[str, datetime] = {}  # Node -> when it was first seen Ready
        self._claims: dict[str, tuple[datetime, str]] = {}  # NodeClaim -> (created, its Node)

    def interrupt(self, action: TimelineAction) -> list[Interrupted]:
        """Notice to the Nodes ``action`` names; returns them (their deadlines to come)."""
        now = self._clock.now()
        deadline = now + timedelta(seconds=action.notice or DEFAULT_NOTICE)
        done = {i.node for i in self.interrupted}
        chosen = []
        for node in sorted(self._server.list(NODES).items, key=lambda n: n["metadata"]["name"]):
            labels = node["metadata"].get("labels") or {}
            if node["metadata"].get("deletionTimestamp") or node["metadata"]["name"] in done:
                continue
            if action.target != "*" and labels.get(wellknown.LABEL_CAPACITY_TYPE) != action.target:
                continue
            if labels.get(wellknown.LABEL_NODEPOOL) is None:
                continue  # not ours: the control plane, a static node
            chosen.append(node)
        for node in chosen[: action.count if action.count is not None else None]:
            if action.via == "queue":
                self._send(node, now, deadline)
                continue
            taints = [*((node.get("spec") or {}).get("taints") or []), dict(NTH_SPOT_TAINT)]
            with suppress(NotFound):
                self._server.patch(NODES, node["metadata"]["name"], {"spec": {"taints": taints}})
                self.interrupted.append(Interrupted(node["metadata"]["name"], now, deadline))
        return [i for i in self.interrupted if i.noticed == now]

    def _send(self, node: Mapping[str, Any], now: datetime, deadline: datetime) -> None:
        """EC2's warning for ``node``'s instance (its provider ID ``aws:///ZONE/i-...``)."""
        if self._queue is None:
            raise ValueError("an interrupt via queue needs the scenario's interruption queue")
        provider = str((node.get("spec") or {}).get("providerID") or "")
        zone, _, instance = provider.removeprefix("aws:///").rpartition("/")
        if not instance.startswith("i-"):
            return  # not an EC2 instance: nothing for EC2 to warn about
        self._queue.send(instance, zone, now)
        self._queued = True
        self.interrupted.append(Interrupted(node["metadata"]["name"], now, deadline))

    def reclaim(self, interrupted: Interrupted) -> None:
        """The deadline: the cloud takes the instance, whatever is still on it."""
        self.observe()
        try:
            self._server.get(NODES, interrupted.node)
        except NotFound:
            interrupted.there_at_deadline = False
            return
        interrupted.there_at_deadline = True
        for pod in self._server.list(PODS).items:
            if (pod.get("spec") or {}).get("nodeName") == interrupted.node:
                with suppress(ApiError):
                    meta = pod["metadata"]
                    self._server.delete(PODS, meta["name"], meta.get("namespace"))

    def observe(self) -> None:
        """Remember when each NodeClaim was made and each Node turned Ready (they may be gone
        by the time the summary is made)."""
        for claim in self._server.list(NODECLAIMS, shared=True).items:
            name = claim["metadata"]["name"]
            node_name = (claim.get("status") or {}).get("nodeName")
            created = parse_timestamp(claim["metadata"]["creationTimestamp"])
            if node_name:
                self._claims[name] = (created, str(node_name))
        for node in self._server.list(NODES, shared=True).items:
            ready = _ready_at(node)
            if ready is not None:
                self._ready.setdefault(node["metadata"]["name"], ready)

    def figures(self, bound_seconds: Mapping[str, float], pods: list[Any]) -> dict[str, Any]:
        """The summary's ``spot_interruption`` block (empty without interruptions)."""
        if not self.interrupted:
            return {}
        self.observe()
        first = min(i.noticed for i in self.interrupted)
        boots = [
            (self._ready[node] - created).total_seconds()
            for created, node in self._claims.values()
            if created >= first and node in self._ready
        ]
        readies = [
            self._ready[node]
            for created, node in self._claims.values()
            if created >= first and node in self._ready
        ]
        boot = min(boots) if boots else None
        waited = [
            seconds
            for pod in pods
            if parse_timestamp(pod["metadata"]["creationTimestamp"]) >= first
            and (seconds := bound_seconds.get(str(pod["metadata"]["uid"]))) is not None
        ]
        unbound = sum(
            1
            for pod in pods
            if parse_timestamp(pod["metadata"]["creationTimestamp"]) >= first
            and bound_after(pod) is None
        )
        deadline = min(i.deadline for i in self.interrupted)
        return {
            "nodes_interrupted": len(self.interrupted),
            "nodes_gone_before_deadline": sum(
                1 for i in self.interrupted if i.there_at_deadline is False
            ),
            "replacements": len(boots),
            "replacement_boot_seconds": None if boot is None else round(boot, 1),
            "replacement_ready_before_deadline": bool(readies) and max(readies) <= deadline,
            "replacement_ready_after_notice_seconds": (
                None if not readies else round((max(readies) - first).total_seconds(), 1)
            ),
            "pods_moved": len(waited) + unbound,
            "pods_waited_max_seconds": round(max(waited), 1) if waited else 0.0,
            "pods_without_place": unbound
            + (0 if boot is None else sum(1 for s in waited if s > boot)),
            **(
                {"queue_messages_left": self._queue.depth()}
                if self._queued and self._queue is not None
                else {}
            ),
        }
