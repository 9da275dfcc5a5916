"""The interruption controller: act on a machine's notice before the cloud takes it away.

A spot instance gets two minutes' warning; waiting for its Node to go NotReady loses them, and
every pod on it restarts only after the garbage collector notices the machine is gone. Upstream
Karpenter's AWS provider polls an SQS queue for EC2 and AWS Health events and, for each
instance it manages (``pkg/controllers/interruption/utils.go: handleMessage``), publishes an
Event, marks an interrupted spot offering unavailable, and deletes the NodeClaim
(``deleteNodeClaim``) so that termination cordons and drains the Node while provisioning finds
room for its pods, which count as pending as soon as their NodeClaim is deleting
(``core.provisioning.state``). A rebalance recommendation is only an Event (``actionForMessage``:
``NoAction``).

Here the notices come from two places: the ``karpenter_capi_interruptions`` hook (``capa``'s
SQS queue) and the Nodes' own marks (``signals``). Where upstream deletes at once, and so evicts
the pods while their replacement is still booting, a notice with time left is acted on in two
steps so that no pod waits for a node that is not there yet:

1. the NodeClaim is annotated with the notice (``ANNOTATION_INTERRUPTION``, its deadline) and its
   Node tainted ``karpenter.sh/disrupted:NoSchedule``: provisioning now launches a replacement
   for the Node's pods through the normal path (``core.provisioning.state.unreplaced_nodes``);
2. the NodeClaim is deleted (termination drains it) once every one of those pods is planned on a
   node that is ready for it (an initialized NodeClaim, a Ready Node), or when only
   ``drain_allowance`` seconds are left before the deadline, whichever comes first.

A notice is handed back to its plugin (``karpenter_capi_interruptions_handled``, which deletes the
message) once step 1 is written, so a crash or an API outage before that leaves it to be
received again, and a restarted controller finds step 2's state on the NodeClaim.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.clock import format_timestamp, parse_timestamp
from karpenter_capi.core.errors import ProviderError
from karpenter_capi.core.hookspecs import (
    INSTANCE_STOPPED,
    INSTANCE_TERMINATED,
    REBALANCE_RECOMMENDATION,
    SCHEDULED_CHANGE,
    SPOT_INTERRUPTED,
    InterruptionNotice,
)
from karpenter_capi.core.interruption.signals import nodes_notices
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.kube.events import NORMAL, WARNING
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES, PODS, Resource
from karpenter_capi.core.lifecycle.metrics import LifecycleReporter
from karpenter_capi.core.lifecycle.nodes import node_is_ready, nodes_for_provider_id
from karpenter_capi.core.lifecycle.writes import Writes
from karpenter_capi.core.plugin_host import PluginError
from karpenter_capi.core.provisioning.state import (
    has_disrupted_taint,
    is_recreated,
    is_reschedulable,
)
from karpenter_capi.core.runtime.controller import WORKLOAD, ControllerContext, Result
from karpenter_capi.core.scheduling.podspec import pod_key

NAME: Final = "interruption"
DEFAULT_INTERVAL: Final = 2.0
"""Seconds between two polls; a plugin's long poll (20 s on SQS) paces a real queue itself."""

# Upstream's Event reasons and messages (pkg/controllers/interruption/events/events.go).
_NOTICE_EVENTS: Final[Mapping[str, tuple[str, str]]] = {
    SPOT_INTERRUPTED: ("SpotInterrupted", "Spot interruption warning was triggered"),
    REBALANCE_RECOMMENDATION: (
        "SpotRebalanceRecommendation",
        "Spot rebalance recommendation was triggered",
    ),
    SCHEDULED_CHANGE: ("InstanceUnhealthy", "An unhealthy warning was triggered for the instance"),
    INSTANCE_STOPPED: ("InstanceStopping", "Instance is stopping"),
    INSTANCE_TERMINATED: ("InstanceTerminating", "Instance is terminating"),
}
_NODE_SOURCE: Final = "node"
DEFAULT_DRAIN_ALLOWANCE: Final = 30.0
"""Seconds before a notice's deadline when the NodeClaim is deleted whatever its replacement's
state: the time its pods get to stop (the default ``terminationGracePeriodSeconds``)."""
# Kinds whose machine is already going: deleted at once, as upstream does.
_AT_ONCE: Final = frozenset({INSTANCE_STOPPED, INSTANCE_TERMINATED})
DISRUPTED_TAINT: Final = {
    "key": wellknown.TAINT_DISRUPTED_KEY,
    "effect": wellknown.TAINT_DISRUPTED_EFFECT,
}
Planned = Callable[[], "dict[str, str] | None"]


def _last_segment(provider_id: str) -> str:
    return provider_id.rstrip("/").rsplit("/", 1)[-1]


class InterruptionController:
    """Periodic: receive notices, delete the NodeClaims they concern, acknowledge them."""

    name = NAME

    def __init__(
        self,
        ctx: ControllerContext,
        *,
        interval: float = DEFAULT_INTERVAL,
        planned: Planned | None = None,
        drain_allowance: float = DEFAULT_DRAIN_ALLOWANCE,
    ) -> None:
        """``planned`` is the provisioner's last plan (pod key -> NodeClaim or Node name); without
        it a NodeClaim is deleted at once, as upstream does."""
        self._ctx = ctx
        self.interval = interval
        self._planned = planned
        self._drain_allowance = drain_allowance
        self._writes = Writes(ctx, NAME)
        self._metrics = LifecycleReporter(ctx.metrics, NAME)
        # NodeClaim uid -> the notice kinds already told (Events): each once, until the
        # NodeClaim is gone.
        self._acted: dict[str, set[str]] = {}
        self._poll_failure: str | None = None
        self._failed: set[str] = set()

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return ((NODECLAIMS, WORKLOAD), (NODES, WORKLOAD), (PODS, WORKLOAD))

    def run_once(self) -> Result:
        received = self._receive()  # may block on a long poll: read the caches after it
        claims = self._ctx.caches.store(NODECLAIMS, WORKLOAD).list()
        live = {str(c["metadata"].get("uid") or c["metadata"]["name"]) for c in claims}
        self._acted = {uid: kinds for uid, kinds in self._acted.items() if uid in live}
        received.extend(
            (_NODE_SOURCE, n)
            for n in nodes_notices(
                self._ctx.caches.store(NODES, WORKLOAD).list(), self._ctx.clock.now()
            )
        )
        handled: dict[str, list[InterruptionNotice]] = {}
        for source, notice in received:
            if self._act(notice, claims, counted=source != _NODE_SOURCE) and source != _NODE_SOURCE:
                handled.setdefault(source, []).append(notice)
        for plugin, notices in handled.items():
            self._acknowledge(plugin, notices)
        for claim in self._ctx.caches.store(NODECLAIMS, WORKLOAD).list():
            if _interruption(claim) is not None and not claim["metadata"].get("deletionTimestamp"):
                self._maybe_delete(claim)
        return Result(requeue_after=self.interval)

    def _receive(self) -> list[tuple[str, InterruptionNotice]]:
        try:
            received = self._ctx.plugins.interruptions()
        except (ProviderError, PluginError) as exc:
            message = f"{NAME}: cannot receive interruption notices: {exc}"
            self._ctx.log.log(
                logging.DEBUG if message == self._poll_failure else logging.WARNING, "%s", message
            )
            self._poll_failure = message
            return []
        self._poll_failure = None
        if self._ctx.metrics is not None:
            for _, notice in received:
                self._ctx.metrics.interruption_received(notice.kind)
        return received

    def _acknowledge(self, plugin: str, notices: list[InterruptionNotice]) -> None:
        try:
            self._ctx.plugins.interruptions_handled(plugin, notices)
        except (ProviderError, PluginError) as exc:
            self._ctx.log.warning(
                "%s: plugin %s could not forget %d notices (they will come again): %s",
                NAME,
                plugin,
                len(notices),
                exc,
            )
            return
        if self._ctx.metrics is not None:
            self._ctx.metrics.interruption_deleted(len(notices))

    def _act(self, notice: InterruptionNotice, claims: list[JsonObject], *, counted: bool) -> bool:
        """Act on every NodeClaim ``notice`` concerns; False when a write failed."""
        wanted = notice.instance
        by_segment = "/" not in wanted
        done = True
        for claim in claims:
            provider_id = str((claim.get("status") or {}).get("providerID") or "")
            if not provider_id:
                continue
            if provider_id != wanted and not (by_segment and _last_segment(provider_id) == wanted):
                continue
            done = self._act_on(claim, provider_id, notice, counted=counted) and done
        return done

    def _first(self, claim: JsonObject, kind: str) -> bool:
        uid = str(claim["metadata"].get("uid") or claim["metadata"]["name"])
        kinds = self._acted.setdefault(uid, set())
        if kind in kinds:
            return False
        kinds.add(kind)
        return True

    def _act_on(
        self, claim: JsonObject, provider_id: str, notice: InterruptionNotice, *, counted: bool
    ) -> bool:
        """Tell, then record the notice on the NodeClaim (step 1); False when a write failed."""
        meta = claim["metadata"]
        if meta.get("deletionTimestamp") or _interruption(claim) is not None:
            return True
        nodes = nodes_for_provider_id(self._ctx.caches, provider_id)
        if self._first(claim, notice.kind):
            self._tell(claim, nodes, notice, counted=counted)
        if notice.kind == REBALANCE_RECOMMENDATION:
            return True
        deadline = "" if notice.deadline is None else format_timestamp(notice.deadline)
        annotations = {
            wellknown.ANNOTATION_INTERRUPTION: notice.kind,
            wellknown.ANNOTATION_INTERRUPTION_DEADLINE: deadline,
        }
        try:
            for node in nodes:
                self._taint(node)
            recorded = self._writes.patch(
                NODECLAIMS, claim, {"metadata": {"annotations": annotations}}
            )
        except ApiError as exc:
            return self._failure(meta["name"], notice.kind, exc)
        self._maybe_delete(recorded)
        return True

    def _tell(
        self,
        claim: JsonObject,
        nodes: Sequence[JsonObject],
        notice: InterruptionNotice,
        *,
        counted: bool,
    ) -> None:
        """The notice, once per NodeClaim and kind: counted, an Event on the claim and its
        Nodes, a log line, and a spot interruption marks its offering unavailable."""
        meta = claim["metadata"]
        if not counted and self._ctx.metrics is not None:
            # A Node's mark is seen at every poll: counted once, when first acted on.
            self._ctx.metrics.interruption_received(notice.kind)
        reason, message = _NOTICE_EVENTS.get(notice.kind, ("Interrupted", notice.kind))
        if notice.deadline is not None:
            message = f"{message}; the instance goes at {notice.deadline.isoformat()}"
        if notice.detail:
            message = f"{message} ({notice.detail})"
        event_type = NORMAL if notice.kind == REBALANCE_RECOMMENDATION else WARNING
        for involved in (claim, *nodes):
            self._writes.event(involved, event_type, reason, message)
        self._ctx.log.info("%s: NodeClaim %s: %s", NAME, meta["name"], message)
        if notice.kind == SPOT_INTERRUPTED:
            self._mark_offering(meta.get("labels") or {})

    def _taint(self, node: JsonObject) -> None:
        """Keep new pods off the Node (the disruption controller leaves the taint alone)."""
        if has_disrupted_taint(node):
            return
        taints = [*((node.get("spec") or {}).get("taints") or []), dict(DISRUPTED_TAINT)]
        meta = node["metadata"]
        # The resourceVersion makes the list's replacement conditional, as a taint write must be.
        patch = {"metadata": {"resourceVersion": meta.get("resourceVersion")}}
        self._writes.patch(NODES, node, {**patch, "spec": {"taints": taints}})

    def _failure(self, name: str, kind: str, exc: ApiError) -> bool:
        line = f"{NAME}: NodeClaim {name} on {kind} failed (will retry): {exc}"
        self._ctx.log.log(logging.DEBUG if line in self._failed else logging.WARNING, "%s", line)
        self._failed.add(line)
        return False

    def _maybe_delete(self, claim: JsonObject) -> None:
        """Step 2: delete the NodeClaim when its pods have somewhere to go, or time is short."""
        kind, deadline = _interruption(claim) or ("", None)
        why = self._due(claim, kind, deadline)
        if why is None:
            return
        meta = claim["metadata"]
        try:
            deleted = self._writes.delete(NODECLAIMS, claim)
        except ApiError as exc:
            self._failure(meta["name"], kind, exc)
            return
        if not deleted:
            return
        provider_id = str((claim.get("status") or {}).get("providerID") or "")
        self._ctx.log.info("%s: deleting NodeClaim %s (%s): %s", NAME, meta["name"], kind, why)
        nodes = nodes_for_provider_id(self._ctx.caches, provider_id) if provider_id else []
        for involved, what in ((claim, "NodeClaim"), *((node, "Node") for node in nodes)):
            self._writes.event(
                involved,
                WARNING,
                "TerminatingOnInterruption",
                f"Interruption triggered termination for the {what}: {why}",
            )
        labels: Mapping[str, Any] = meta.get("labels") or {}
        self._metrics.disrupted(
            kind,
            str(labels.get(wellknown.LABEL_NODEPOOL, "")),
            str(labels.get(wellknown.LABEL_CAPACITY_TYPE, "")),
        )

    def _due(self, claim: JsonObject, kind: str, deadline: datetime | None) -> str | None:
        """Why the NodeClaim goes now, or None while its pods wait for their replacement."""
        if self._planned is None or kind in _AT_ONCE or deadline is None:
            return "the instance is going"
        left = (deadline - self._ctx.clock.now()).total_seconds()
        if left <= self._drain_allowance:
            return f"{max(left, 0):.0f}s left before the instance goes"
        waiting = self._unplaced(claim)
        if not waiting:
            return "its pods have a node ready for them"
        return None

    def _unplaced(self, claim: JsonObject) -> list[str]:
        """The pods of the NodeClaim's Node the last plan puts nowhere ready yet."""
        node_name = (claim.get("status") or {}).get("nodeName")
        if not node_name:
            return []
        pods = [
            pod_key(p)
            for p in self._ctx.caches.store(PODS, WORKLOAD).list()
            if (p.get("spec") or {}).get("nodeName") == node_name
            and is_reschedulable(p)
            and is_recreated(p)
        ]
        planned = (self._planned() if self._planned is not None else None) or {}
        # A plan made before the notice may still place them where they are.
        itself = {str(claim["metadata"]["name"]), str(node_name)}
        return [
            key for key in pods if planned.get(key) in itself or not self._ready(planned.get(key))
        ]

    def _ready(self, target: str | None) -> bool:
        """Whether a planned target can take pods now: an initialized NodeClaim, a Ready Node."""
        if target is None:
            return False
        claim = self._ctx.caches.store(NODECLAIMS, WORKLOAD).get(target)
        if claim is not None:
            going = claim["metadata"].get("deletionTimestamp") or _interruption(claim)
            return not going and any(
                c.get("type") == NodeClaimConditionType.INITIALIZED and c.get("status") == "True"
                for c in (claim.get("status") or {}).get("conditions") or ()
            )
        node = self._ctx.caches.store(NODES, WORKLOAD).get(target)
        return (
            node is not None
            and node_is_ready(node)
            and not has_disrupted_taint(node)
            and not node["metadata"].get("deletionTimestamp")
        )

    def _mark_offering(self, labels: Mapping[str, Any]) -> None:
        instance_type = str(labels.get(wellknown.LABEL_INSTANCE_TYPE) or "")
        zone = str(labels.get(wellknown.LABEL_TOPOLOGY_ZONE) or "")
        if instance_type and zone:
            # Upstream marks the spot offering, whatever the NodeClaim's capacity type.
            self._ctx.plugins.interrupted.mark(instance_type, zone, wellknown.CAPACITY_TYPE_SPOT)


def _interruption(claim: Mapping[str, Any]) -> tuple[str, datetime | None] | None:
    """The notice recorded on a NodeClaim (kind, deadline), or None."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    kind = annotations.get(wellknown.ANNOTATION_INTERRUPTION)
    if kind is None:
        return None
    raw = str(annotations.get(wellknown.ANNOTATION_INTERRUPTION_DEADLINE) or "")
    try:
        return str(kind), parse_timestamp(raw) if raw else None
    except ValueError:
        return str(kind), None
