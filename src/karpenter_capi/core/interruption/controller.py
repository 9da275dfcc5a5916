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
SQS queue) and the Nodes' own taints and conditions (``signals``). A notice is handed back to
its plugin (``karpenter_capi_interruptions_handled``, which deletes the message) only once every
NodeClaim it concerns is deleting, so a crash or an API outage in between leaves it to be
received again; deleting a NodeClaim already deleting is skipped, so doing it twice is harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from karpenter_capi.core.api import wellknown
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
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES, Resource
from karpenter_capi.core.lifecycle.metrics import LifecycleReporter
from karpenter_capi.core.lifecycle.nodes import nodes_for_provider_id
from karpenter_capi.core.lifecycle.writes import Writes
from karpenter_capi.core.plugin_host import PluginError
from karpenter_capi.core.runtime.controller import WORKLOAD, ControllerContext, Result

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


def _last_segment(provider_id: str) -> str:
    return provider_id.rstrip("/").rsplit("/", 1)[-1]


class InterruptionController:
    """Periodic: receive notices, delete the NodeClaims they concern, acknowledge them."""

    name = NAME

    def __init__(self, ctx: ControllerContext, *, interval: float = DEFAULT_INTERVAL) -> None:
        self._ctx = ctx
        self.interval = interval
        self._writes = Writes(ctx, NAME)
        self._metrics = LifecycleReporter(ctx.metrics, NAME)
        # NodeClaim uid -> the notice kinds already acted on (Event, deletion): each once,
        # until the cache shows the deletion or the NodeClaim is gone.
        self._acted: dict[str, set[str]] = {}
        self._poll_failure: str | None = None

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return ((NODECLAIMS, WORKLOAD), (NODES, WORKLOAD))

    def run_once(self) -> Result:
        claims = self._ctx.caches.store(NODECLAIMS, WORKLOAD).list()
        live = {str(c["metadata"].get("uid") or c["metadata"]["name"]) for c in claims}
        self._acted = {uid: kinds for uid, kinds in self._acted.items() if uid in live}
        received = self._receive()
        received.extend(
            (_NODE_SOURCE, n) for n in nodes_notices(self._ctx.caches.store(NODES, WORKLOAD).list())
        )
        handled: dict[str, list[InterruptionNotice]] = {}
        for source, notice in received:
            if self._act(notice, claims) and source != _NODE_SOURCE:
                handled.setdefault(source, []).append(notice)
        for plugin, notices in handled.items():
            self._acknowledge(plugin, notices)
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

    def _act(self, notice: InterruptionNotice, claims: list[JsonObject]) -> bool:
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
            done = self._act_on(claim, provider_id, notice) and done
        return done

    def _first(self, claim: JsonObject, kind: str) -> bool:
        uid = str(claim["metadata"].get("uid") or claim["metadata"]["name"])
        kinds = self._acted.setdefault(uid, set())
        if kind in kinds:
            return False
        kinds.add(kind)
        return True

    def _act_on(self, claim: JsonObject, provider_id: str, notice: InterruptionNotice) -> bool:
        meta = claim["metadata"]
        if meta.get("deletionTimestamp"):
            return True
        if not self._first(claim, notice.kind):
            return True
        nodes = nodes_for_provider_id(self._ctx.caches, provider_id)
        reason, message = _NOTICE_EVENTS.get(notice.kind, ("Interrupted", notice.kind))
        if notice.deadline is not None:
            message = f"{message}; the instance goes at {notice.deadline.isoformat()}"
        if notice.detail:
            message = f"{message} ({notice.detail})"
        event_type = NORMAL if notice.kind == REBALANCE_RECOMMENDATION else WARNING
        for involved in (claim, *nodes):
            self._writes.event(involved, event_type, reason, message)
        labels: Mapping[str, Any] = meta.get("labels") or {}
        if notice.kind == REBALANCE_RECOMMENDATION:
            self._ctx.log.info("%s: NodeClaim %s: %s", NAME, meta["name"], message)
            return True
        if notice.kind == SPOT_INTERRUPTED:
            self._mark_offering(labels)
        try:
            deleted = self._writes.delete(NODECLAIMS, claim)
        except ApiError as exc:
            self._acted[str(meta.get("uid") or meta["name"])].discard(notice.kind)
            self._ctx.log.warning(
                "%s: deleting NodeClaim %s on %s failed (will retry): %s",
                NAME,
                meta["name"],
                notice.kind,
                exc,
            )
            return False
        if deleted:
            self._ctx.log.info(
                "%s: deleting NodeClaim %s (%s): %s", NAME, meta["name"], provider_id, message
            )
            for involved in (claim, *nodes):
                self._writes.event(
                    involved,
                    NORMAL,
                    "TerminatingOnInterruption",
                    "Interruption triggered termination for the NodeClaim",
                )
            self._metrics.disrupted(
                notice.kind,
                str(labels.get(wellknown.LABEL_NODEPOOL, "")),
                str(labels.get(wellknown.LABEL_CAPACITY_TYPE, "")),
            )
        return True

    def _mark_offering(self, labels: Mapping[str, Any]) -> None:
        instance_type = str(labels.get(wellknown.LABEL_INSTANCE_TYPE) or "")
        zone = str(labels.get(wellknown.LABEL_TOPOLOGY_ZONE) or "")
        if instance_type and zone:
            # Upstream marks the spot offering, whatever the NodeClaim's capacity type.
            self._ctx.plugins.interrupted.mark(instance_type, zone, wellknown.CAPACITY_TYPE_SPOT)
