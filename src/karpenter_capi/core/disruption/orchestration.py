"""Carrying out a disruption command: taint, launch replacements, wait, delete; or roll back.

Upstream Karpenter's orchestration queue, as steps the disruption controller takes once per
pass, never blocking: the candidates are tainted ``karpenter.sh/disrupted:NoSchedule`` (so no
new pod lands on them) and marked with a ``DisruptionReason`` condition, replacement
NodeClaims are created exactly as provisioning creates them, and only once every replacement is
``Initialized`` are the candidates' NodeClaims deleted (the termination controllers drain them,
honouring PDBs). A replacement that disappears, or does not initialize within the timeout, gives
the command up: the taints and conditions come off and the candidates stay.

Taints go on with the Node's resourceVersion as a precondition, re-read on conflict, so a
label another controller writes meanwhile is never lost.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.meta import ConditionStatus
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.disruption.candidates import condition_true
from karpenter_capi.core.disruption.methods import Command
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.errors import ApiError, Conflict, NotFound
from karpenter_capi.core.kube.events import NORMAL, WARNING
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES
from karpenter_capi.core.observability.logs import ref
from karpenter_capi.core.provisioning.nodeclaims import log_created, nodeclaim_body
from karpenter_capi.core.runtime.controller import ControllerContext
from karpenter_capi.core.termination.actions import Actions, set_condition

log = logging.getLogger(__name__)

DISRUPTED_TAINT: Final = {
    "key": wellknown.TAINT_DISRUPTED_KEY,
    "effect": wellknown.TAINT_DISRUPTED_EFFECT,
}
_CONFLICT_RETRIES: Final = 3


@dataclass
class InFlight:
    """A command whose replacements are launching; the candidates wait, tainted."""

    command: Command
    replacements: list[str]
    started: float
    done: bool = False
    outcome: str = ""
    deleted: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    """Replacements the caches have shown: one missing after that is gone, not just late."""


class Orchestrator:
    """Executes commands through ``ctx.client`` (or logs them under ``ctx.dry_run``)."""

    def __init__(self, ctx: ControllerContext, *, replacement_timeout: float) -> None:
        self._ctx = ctx
        self._actions = Actions(ctx, log)
        self._timeout = replacement_timeout

    # -- start ---------------------------------------------------------------------------

    def start(self, command: Command, raw_pools: Mapping[str, Mapping[str, Any]]) -> InFlight:
        """Taint and mark the candidates, create the replacements; delete at once when there
        are none. Raises nothing: a failure rolls back and is reported in ``outcome``."""
        flight = InFlight(command, [], self._ctx.clock.monotonic())
        try:
            self._start(flight, raw_pools)
        except ApiError as error:
            self.abort(flight, f"the API refused a step: {error}")
        return flight

    def _start(self, flight: InFlight, raw_pools: Mapping[str, Mapping[str, Any]]) -> None:
        command = flight.command
        tainted: list[str] = []
        for candidate in command.candidates:
            if not self._set_taint(candidate.node_name, present=True):
                self._untaint(tainted)
                flight.done, flight.outcome = True, f"could not taint node {candidate.node_name}"
                return
            tainted.append(candidate.node_name)
        for candidate in command.candidates:
            self._mark(candidate.name, command)
        self._record_decision(command)
        self._log_decision(command)
        try:
            for claim in command.replacements:
                raw_pool = raw_pools[claim.nodepool.name]
                reason = command.reason.value.lower()
                flight.replacements.append(self._create(raw_pool, claim, reason))
        except (ApiError, KeyError) as error:
            self.abort(flight, f"could not create a replacement: {error}")
            return
        for candidate in command.candidates:
            verb = "Replace" if command.replacements else "Delete"
            message = f"Disrupting NodeClaim: {command.reason.value}/{verb}"
            if flight.replacements:
                message += f", waiting for {', '.join(flight.replacements)}"
                self._event(candidate.nodeclaim, NORMAL, "DisruptionLaunching", message)
        if not command.replacements:
            self._delete_candidates(flight)

    # -- progress ------------------------------------------------------------------------

    def progress(self, flight: InFlight, nodeclaims: Mapping[str, Mapping[str, Any]]) -> None:
        """One look at the replacements: all initialized -> delete the candidates."""
        if flight.done:
            return
        elapsed = self._ctx.clock.monotonic() - flight.started
        waiting = []
        for name in flight.replacements:
            claim = nodeclaims.get(name)
            if self._ctx.dry_run:
                continue
            if claim is None and name not in flight.seen:
                waiting.append(name)  # not in the caches yet
                continue
            if claim is None or (claim.get("metadata") or {}).get("deletionTimestamp"):
                self.abort(flight, f"replacement {name} is gone")
                return
            flight.seen.add(name)
            if not condition_true(claim, NodeClaimConditionType.INITIALIZED):
                waiting.append(name)
        if waiting and elapsed > self._timeout:
            self.abort(
                flight,
                f"replacements {', '.join(waiting)} not initialized after {self._timeout:.0f}s",
            )
            return
        if not waiting:
            self._delete_candidates(flight)

    def abort(self, flight: InFlight, why: str) -> None:
        """Give the command up: the candidates stay, untainted and unmarked."""
        flight.done, flight.outcome = True, f"gave up: {why}"
        log.warning("disruption command gave up (%s): %s", flight.command.describe(), why)
        try:
            self._untaint([c.node_name for c in flight.command.candidates])
            for candidate in flight.command.candidates:
                self._unmark(candidate.name)
        except ApiError as error:
            # What stays marked is restored by the controller's next pass.
            log.warning("disruption: rollback incomplete: %s", error)
        for candidate in flight.command.candidates:
            self._event(
                candidate.nodeclaim,
                WARNING,
                "DisruptionFailed",
                f"Disruption for {flight.command.reason.value} given up: {why}",
            )

    def restore(self, node_name: str, nodeclaim: str) -> None:
        """Undo what an interrupted command left on a node and its NodeClaim."""
        self._untaint([node_name])
        self._unmark(nodeclaim)

    # -- steps ---------------------------------------------------------------------------

    def _delete_candidates(self, flight: InFlight) -> None:
        command = flight.command
        metrics = self._ctx.metrics
        verb = "Replace" if command.replacements else "Delete"
        for candidate in command.candidates:
            if candidate.name in flight.deleted:
                continue  # an earlier attempt got this far before an API error
            message = f"Disrupting NodeClaim: {command.reason.value}/{verb}"
            self._event(candidate.nodeclaim, NORMAL, "DisruptionTerminating", message)
            self._event_node(candidate.node, message)
            self._actions.delete(NODECLAIMS, candidate.name)
            flight.deleted.append(candidate.name)
            if metrics is not None and not self._ctx.dry_run:
                metrics.nodeclaim_disrupted(
                    candidate.nodepool,
                    reason=command.reason.value.lower(),
                    capacity_type=candidate.capacity_type,
                )
        flight.done, flight.outcome = True, "candidates deleted"
        log.debug("disruption: %s", command.describe())

    def _record_decision(self, command: Command) -> None:
        metrics = self._ctx.metrics
        if metrics is None or self._ctx.dry_run:
            return
        kind = {
            "multi-node-consolidation": "multi",
            "single-node-consolidation": "single",
        }.get(command.method, "")
        metrics.disruption_decision(
            command.decision, reason=command.reason.value.lower(), consolidation_type=kind
        )

    def _log_decision(self, command: Command) -> None:
        """Upstream's one line per command carried out, with its fields."""
        log.info(
            "disrupting node(s)",
            extra={
                "command-id": str(uuid.uuid4()),
                "reason": command.reason.value.lower(),
                "decision": command.decision,
                "disrupted-node-count": len(command.candidates),
                "replacement-node-count": len(command.replacements),
                "pod-count": sum(len(c.pods) for c in command.candidates),
                "disrupted-nodes": [
                    {
                        "Node": ref(c.node_name),
                        "NodeClaim": ref(c.name),
                        "capacity-type": c.capacity_type,
                        "instance-type": c.instance_type.name if c.instance_type else "",
                    }
                    for c in command.candidates
                ],
                "replacement-nodes": [
                    {
                        "capacity-type": r.cheapest()[1].capacity_type,
                        "instance-types": [it.name for it in r.instance_types[:5]],
                    }
                    for r in command.replacements
                ],
                "savings": round(command.savings, 4),
                **({"dry-run": True} if self._ctx.dry_run else {}),
            },
        )

    def _create(self, raw_pool: Mapping[str, Any], claim: Any, reason: str) -> str:
        body = nodeclaim_body(raw_pool, claim)
        if self._ctx.dry_run:
            log_created("(dry run)", claim, dry_run=True)
            return f"(dry run) {raw_pool['metadata']['name']}"
        created = self._ctx.client.create(NODECLAIMS, body)
        name = str(created["metadata"]["name"])
        if self._ctx.metrics is not None:
            self._ctx.metrics.nodeclaim_created(claim.nodepool.name, reason=reason)
        log_created(name, claim)
        return name

    def _set_taint(self, node_name: str, *, present: bool) -> bool:
        """Add or remove the disrupted taint; False when the Node is gone or keeps changing."""
        for _ in range(_CONFLICT_RETRIES):
            try:
                node = self._ctx.client.get(NODES, node_name)
            except NotFound:
                return not present
            taints = [
                t
                for t in (node.get("spec") or {}).get("taints") or []
                if t.get("key") != wellknown.TAINT_DISRUPTED_KEY
            ]
            if present:
                taints.append(dict(DISRUPTED_TAINT))
            if taints == ((node.get("spec") or {}).get("taints") or []):
                return True
            try:
                self._actions.patch(
                    NODES,
                    node,
                    {"spec": {"taints": taints or None}},
                    what="add the disrupted taint" if present else "remove the disrupted taint",
                )
                return True
            except Conflict:
                continue
            except NotFound:
                return not present
        return False

    def _untaint(self, node_names: Sequence[str]) -> None:
        for name in node_names:
            if not self._set_taint(name, present=False):
                log.warning("could not remove the disrupted taint from node %s", name)

    def _mark(self, nodeclaim: str, command: Command) -> None:
        reason, message = command.reason.value, f"{command.method}: {command.decision}"
        write_disruption_reason(self._ctx, self._actions, nodeclaim, reason, message)

    def _unmark(self, nodeclaim: str) -> None:
        write_disruption_reason(self._ctx, self._actions, nodeclaim, None)

    def _event(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        self._actions.event(NODECLAIMS, obj, event_type, reason, message)

    def _event_node(self, node: Mapping[str, Any], message: str) -> None:
        self._actions.event(NODES, node, NORMAL, "DisruptionTerminating", message)


def write_disruption_reason(
    ctx: ControllerContext, actions: Actions, name: str, reason: str | None, message: str = ""
) -> None:
    """Set the NodeClaim's ``DisruptionReason`` condition (True, ``reason``), or remove it when
    ``reason`` is None; read afresh and retried on conflict, nothing when the claim is gone."""
    kind = NodeClaimConditionType.DISRUPTION_REASON.value
    for _ in range(_CONFLICT_RETRIES):
        try:
            claim = ctx.client.get(NODECLAIMS, name)
        except NotFound:
            return
        conditions: list[JsonObject] | None
        if reason is None:
            current = (claim.get("status") or {}).get("conditions") or []
            conditions = [c for c in current if c.get("type") != kind]
            if len(conditions) == len(current):
                return
        else:
            conditions = set_condition(
                claim,
                kind,
                ConditionStatus.TRUE,
                reason=reason,
                message=message,
                now=ctx.clock.now(),
            )
            if conditions is None:
                return
        try:
            actions.patch(
                NODECLAIMS,
                claim,
                {"status": {"conditions": conditions}},
                subresource="status",
                what=f"set condition {kind}",
            )
            return
        except Conflict:
            continue
        except NotFound:
            return
