"""The disruption controller: one pass every few seconds, one command at a time per pass.

Each pass reads the informer caches, resolves the NodePools' inventories, and runs the planner
(``planner.plan``). A command for emptiness or consolidation is not acted on at once: like
upstream Karpenter, it waits ``validation_delay`` (15 s) and is then checked again against a
fresh view (its nodes still candidates, still within budget, the simulation still valid, the
replacement no dearer); only then does the orchestrator carry it out. Drift is not validated
(the node is replaced either way). Commands under way are advanced every pass; their
replacements, and the nodes provisioning counted pending pods on in the last
``nomination_window``, are left alone.

After each pass, every consolidatable node the pass keeps gets an ``Unconsolidatable`` Event, on
the Node and on its NodeClaim, with the reason the planner recorded for it (``verdicts``),
deduplicated for 15 minutes as upstream does, so ``kubectl describe`` says why a node stays.
A consolidation command a ``Balanced`` NodePool scored gets a ``ConsolidationApproved`` Event
with the score, as upstream: on the Node and NodeClaim of a single-node move, on the NodePool of
a multi-node one (the score is the move's, not one node's).

A pass that finds nothing is not repeated until something it reads changes (the Nodes,
NodeClaims, pods, NodePools, NodeClasses and PDBs in the caches, the protected names) or the
minute turns, which also bounds how long a change outside those (a price) waits.

Every pass removes the ``karpenter.sh/disrupted`` taint and the ``DisruptionReason`` condition
from nodes no command of this process holds and whose NodeClaims are not deleting (left by a
process that died mid-command, a leader that lost its Lease, a failed rollback), as upstream
does; ``reset`` forgets this process's commands when leadership is regained.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.disruption.budgets import BudgetLedger
from karpenter_capi.core.disruption.candidates import (
    Candidate,
    CandidateSet,
    DisruptionBudgets,
    condition_true,
    find_candidates,
)
from karpenter_capi.core.disruption.methods import EMPTINESS, SINGLE_NODE, Command
from karpenter_capi.core.disruption.orchestration import InFlight, Orchestrator
from karpenter_capi.core.disruption.passfacts import pass_facts
from karpenter_capi.core.disruption.planner import (
    PassReport,
    PassSettings,
    plan,
    provider_refusals,
)
from karpenter_capi.core.disruption.refusals import ClaimModels, ask_providers
from karpenter_capi.core.disruption.simulation import Replacement, Simulator
from karpenter_capi.core.disruption.verdicts import UNCONSOLIDATABLE, node_verdicts
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.kube.events import NORMAL, UNCONSOLIDATABLE_DEDUPE
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    POD_DISRUPTION_BUDGETS,
    Resource,
)
from karpenter_capi.core.provisioning.controller import ROUND_RESOURCES
from karpenter_capi.core.provisioning.inventory import NodePoolInventory, resolve_inventory
from karpenter_capi.core.provisioning.state import (
    ClusterSnapshot,
    ParsedCluster,
    has_disrupted_taint,
    is_interrupted,
)
from karpenter_capi.core.runtime.controller import WORKLOAD, ControllerContext, Result
from karpenter_capi.core.termination.actions import Actions

log = logging.getLogger(__name__)

CONSOLIDATION_APPROVED: Final = "ConsolidationApproved"
DEFAULT_POLL_SECONDS: Final = 10.0
DEFAULT_VALIDATION_DELAY: Final = 15.0
DEFAULT_REPLACEMENT_TIMEOUT: Final = 600.0
DEFAULT_NOMINATION_WINDOW: Final = 20.0
"""Upstream's: twice the batching window's maximum, so a pod still in a batch is covered."""
HISTORY: Final = 10
"""Commands kept in ``history``. Each pins its candidates' pods, NodeClaims and NodePool models
long after they are gone; a hundred of them was, after a few hours of churn, more memory than
every other structure of the controller together (docs/reliability.md#a-day-of-churn)."""
REPLACEMENT_GRACE: Final = 300.0
DELETION_GRACE: Final = 60.0
"""How long a replacement stays protected after its command ends, while the moved pods land."""


@dataclass(frozen=True)
class DisruptionSettings:
    poll_seconds: float = DEFAULT_POLL_SECONDS
    validation_delay: float = DEFAULT_VALIDATION_DELAY
    replacement_timeout: float = DEFAULT_REPLACEMENT_TIMEOUT
    nomination_window: float = DEFAULT_NOMINATION_WINDOW
    spot_to_spot: bool = False
    """Upstream's ``SpotToSpotConsolidation`` feature gate (off by default)."""


@dataclass
class _Pending:
    command: Command
    due: float


def _nothing_nominated(_seconds: float) -> frozenset[str]:
    return frozenset()


class DisruptionController:
    """Finds and carries out voluntary disruption (see the module docstring)."""

    name = "disruption"

    def __init__(
        self,
        ctx: ControllerContext,
        *,
        nominated: Callable[[float], frozenset[str]] = _nothing_nominated,
        nominations: Callable[[], Mapping[str, frozenset[str]]] = dict,
        is_leader: Callable[[], bool] = lambda: True,
        dry_run_status: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
        settings: DisruptionSettings | None = None,
    ) -> None:
        self._ctx = ctx
        # Parsed pods (shared with provisioning) and bound-pod sums, kept across passes.
        self._bound = ParsedCluster(ctx.pod_specs)
        self.settings = settings or DisruptionSettings()
        self.interval = self.settings.poll_seconds
        self._nominated = nominated
        self._nominations = nominations
        self._is_leader = is_leader
        self._dry_run_status = dry_run_status
        self._dry_run_logged: str | None = None
        self._actions = Actions(ctx, log)
        self._orchestrator = Orchestrator(
            ctx, replacement_timeout=self.settings.replacement_timeout
        )
        self._pending: _Pending | None = None
        self._in_flight: list[InFlight] = []
        self._protected_until: dict[str, float] = {}
        self._raw_pools: dict[str, Mapping[str, Any]] = {}
        self._quiet_since: int | None = None
        self._quiet_stamp: tuple[object, ...] | None = None
        self._deleted_until: dict[str, float] = {}
        self._claim_models = ClaimModels()
        self.last_report: PassReport | None = None
        self.history: deque[InFlight] = deque(maxlen=HISTORY)
        """The latest commands started, for tests and debugging (bounded)."""

    def reads(self) -> Sequence[tuple[Resource, str]]:
        # What a provisioning round reads, and the PDBs.
        return [(r, WORKLOAD) for r in (*ROUND_RESOURCES, POD_DISRUPTION_BUDGETS)]

    # -- the pass ------------------------------------------------------------------------

    def run_once(self) -> Result:
        caches = self._ctx.caches
        snapshot = ClusterSnapshot.from_stores(lambda resource: caches.store(resource).list())
        if self._ctx.dry_run and self._dry_run_status is not None:
            snapshot.nodeclaims = [self._dry_run_status(c) for c in snapshot.nodeclaims]
        self._advance(snapshot)
        self._restore_abandoned(snapshot)
        now = self._ctx.clock.monotonic()
        if self._pending is not None:
            if now < self._pending.due:
                return Result(requeue_after=self._pending.due - now)
            pending, self._pending = self._pending, None
            self._validate_and_start(pending.command, snapshot)
            return Result(requeue_after=self.interval)
        stamp = self._stamp()
        if stamp is not None and stamp == self._quiet_stamp:
            # Not one of the stores the fingerprint reads has taken a write since: the same
            # fingerprint, without digesting every object again (every 10 s in every cluster
            # of a fleet).
            return Result(requeue_after=self.interval)
        fingerprint = self._fingerprint(snapshot)
        if fingerprint == self._quiet_since:
            # Nothing a pass reads has changed since one found nothing to do.
            self._quiet_stamp = stamp
            return Result(requeue_after=self.interval)
        inventories = self._inventories()
        report = self._plan(snapshot, inventories)
        self.last_report = report
        self._tell_kept(report, snapshot, inventories)
        command = report.command
        if command is None:
            self._quiet_since, self._quiet_stamp = fingerprint, stamp
            return Result(requeue_after=self.interval)
        self._quiet_since = self._quiet_stamp = None
        self._tell_scores(command)
        if command.reason.value == "Drifted" or self.settings.validation_delay <= 0:
            self._start(command)
            return Result(requeue_after=self.interval)
        log.debug(
            "disruption: %s (validating in %.0fs)",
            command.describe(),
            self.settings.validation_delay,
        )
        self._pending = _Pending(command, now + self.settings.validation_delay)
        return Result(requeue_after=self.settings.validation_delay)

    def _stamp(self) -> tuple[object, ...] | None:
        """What ``_fingerprint`` digests, as change counts: every store it reads (each count
        moves with every write, so equal counts are equal contents), the protected names and
        the minute. ``None`` in a dry run with statuses of its own, which no store counts."""
        if self._ctx.dry_run and self._dry_run_status is not None:
            return None
        caches = self._ctx.caches
        return (
            tuple(
                caches.store(resource).changes
                for resource in (*ROUND_RESOURCES, POD_DISRUPTION_BUDGETS)
            ),
            self._protected(),
            self._ctx.clock.now().replace(second=0, microsecond=0),
        )

    def _fingerprint(self, snapshot: ClusterSnapshot) -> int:
        """A digest of everything a pass depends on: the objects' resourceVersions, the
        protected names, and the minute (budget schedules and do-not-disrupt durations move
        with time alone)."""
        caches = self._ctx.caches

        def versions(objects: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
            return tuple(
                sorted(
                    f"{(o.get('metadata') or {}).get('namespace', '')}/"
                    f"{(o.get('metadata') or {}).get('name', '')}@"
                    f"{(o.get('metadata') or {}).get('resourceVersion', '')}"
                    for o in objects
                )
            )

        # Pods by what disruption reads of them, not their resourceVersion: status updates
        # (readiness, restarts) would otherwise defeat the skip in a real cluster.
        pods = tuple(
            sorted(
                (
                    str((p.get("metadata") or {}).get("namespace", "")),
                    str((p.get("metadata") or {}).get("name", "")),
                    str((p.get("spec") or {}).get("nodeName", "")),
                    str((p.get("status") or {}).get("phase", "")),
                    bool((p.get("metadata") or {}).get("deletionTimestamp")),
                    str(
                        ((p.get("metadata") or {}).get("annotations") or {}).get(
                            wellknown.ANNOTATION_DO_NOT_DISRUPT, ""
                        )
                    ),
                )
                for p in snapshot.pods
            )
        )
        return hash(
            (
                versions(snapshot.nodes),
                versions(snapshot.nodeclaims),
                pods,
                versions(caches.store(NODEPOOLS).list()),
                versions(caches.store(CLUSTER_API_NODE_CLASSES).list()),
                versions(caches.store(POD_DISRUPTION_BUDGETS).list()),
                self._protected(),
                self._ctx.clock.now().replace(second=0, microsecond=0),
            )
        )

    def _inventories(self) -> list[NodePoolInventory]:
        try:
            ctx = self._ctx
            return resolve_inventory(ctx.client, ctx.plugins, stores=ctx.caches.store)
        except ApiError as error:
            log.warning("disruption: cannot read NodePools: %s", error)
            return []

    def _protected(self) -> frozenset[str]:
        now = self._ctx.clock.monotonic()
        self._protected_until = {n: t for n, t in self._protected_until.items() if t > now}
        names = set(self._protected_until)
        for flight in self._in_flight:
            names.update(flight.replacements)
        return frozenset(names) | self._nominated(self.settings.nomination_window)

    def _blocked(self, nodeclaims: list[Mapping[str, Any]]) -> Mapping[str, str]:
        return ask_providers(self._ctx.plugins, nodeclaims, self._claim_models)

    def _plan(
        self, snapshot: ClusterSnapshot, inventories: Sequence[NodePoolInventory]
    ) -> PassReport:
        report = plan(
            snapshot,
            inventories,
            self._ctx.caches.store(POD_DISRUPTION_BUDGETS).list(),
            now=self._ctx.clock.now(),
            clock=self._ctx.clock,
            protected=self._protected(),
            blocked=self._blocked,
            nominations=self._nominations(),
            settings=PassSettings(spot_to_spot=self.settings.spot_to_spot),
            parsed=self._bound,
        )
        self._raw_pools = {inv.nodepool: inv.raw for inv in inventories}
        metrics = self._ctx.metrics
        if metrics is not None:
            for seconds in report.simulation_seconds:
                metrics.observe_scheduling(seconds, controller=self.name)
            for method, seconds in report.method_seconds.items():
                kind = method.split("-")[0] if "consolidation" in method else ""
                metrics.observe_disruption_evaluation(method, kind, seconds)
            metrics.set_disruption_eligible(
                "drifted", sum(1 for c in report.candidates if c.drifted)
            )
            metrics.set_disruption_eligible(
                "underutilized", sum(1 for c in report.candidates if c.consolidatable)
            )
            for pool, reasons in report.budgets.items():
                for reason, allowed in reasons.items():
                    metrics.set_allowed_disruptions(pool, reason.lower(), allowed)
        return report

    def _tell_kept(
        self,
        report: PassReport,
        snapshot: ClusterSnapshot,
        inventories: Sequence[NodePoolInventory],
    ) -> None:
        """An ``Unconsolidatable`` Event on each consolidatable node the pass keeps, and on its
        NodeClaim. A dry run writes none (``explain`` shows the same reasons)."""
        if self._ctx.dry_run:
            return
        pools = {i.nodepool: i.model for i in inventories if i.model is not None}
        for verdict in node_verdicts(report, snapshot, pools, self._ctx.clock.now()):
            if not verdict.unconsolidatable:
                continue
            for resource, obj in ((NODES, verdict.node_object), (NODECLAIMS, verdict.claim_object)):
                if obj:
                    self._actions.event(
                        resource,
                        obj,
                        NORMAL,
                        UNCONSOLIDATABLE,
                        verdict.reason,
                        dedupe=UNCONSOLIDATABLE_DEDUPE,
                    )

    def _tell_scores(self, command: Command) -> None:
        """``ConsolidationApproved`` with each ``Balanced`` NodePool's score of the command."""
        if self._ctx.dry_run:
            return
        for pool, score in sorted(command.scores.items()):
            message = score.summary()
            if command.method == SINGLE_NODE:
                [candidate] = command.candidates
                self._actions.event(NODES, candidate.node, NORMAL, CONSOLIDATION_APPROVED, message)
                self._actions.event(
                    NODECLAIMS, candidate.nodeclaim, NORMAL, CONSOLIDATION_APPROVED, message
                )
            elif pool in self._raw_pools:
                self._actions.event(
                    NODEPOOLS, self._raw_pools[pool], NORMAL, CONSOLIDATION_APPROVED, message
                )

    # -- validation ----------------------------------------------------------------------

    def _validate_and_start(self, command: Command, snapshot: ClusterSnapshot) -> None:
        fresh = self._revalidate(command, snapshot)
        if isinstance(fresh, str):
            log.debug("disruption: dropped %s: %s", command.describe(), fresh)
            return
        self._start(fresh)

    def _revalidate(self, command: Command, snapshot: ClusterSnapshot) -> Command | str:
        """The command again, against the cluster as it is now; or why it no longer holds."""
        inventories = [i for i in self._inventories() if i.model is not None and not i.error]
        found = find_candidates(
            nodes=snapshot.nodes,
            nodeclaims=snapshot.nodeclaims,
            pods=snapshot.pods,
            inventories=inventories,
            budgets=DisruptionBudgets(self._ctx.caches.store(POD_DISRUPTION_BUDGETS).list()),
            now=self._ctx.clock.now(),
            protected=self._protected(),
            facts=pass_facts(self._bound),
        )
        still = _still_candidates(command, found)
        if isinstance(still, str):
            return still
        refused = provider_refusals(self._blocked, snapshot, still)
        if refused:
            name, why = next(iter(sorted(refused.items())))
            return f"provider refuses {name}: {why}"
        pools = {i.nodepool: i.model for i in inventories if i.model is not None}
        ledger = BudgetLedger(
            pools,
            snapshot.nodeclaims,
            snapshot.nodes,
            self._ctx.clock.now(),
            facts=pass_facts(self._bound),
        )
        used_up = _budget_used_up(still, ledger, command)
        if used_up is not None:
            return used_up
        self._raw_pools = {inv.nodepool: inv.raw for inv in inventories}
        if command.method == EMPTINESS:
            return Command(command.method, command.reason, still, savings=command.savings)
        simulator = Simulator(
            snapshot,
            inventories,
            self._ctx.clock,
            spot_to_spot=self.settings.spot_to_spot,
            nominations=self._nominations(),
            parsed=self._bound,
        )
        outcome = simulator.consolidate(still)
        if not isinstance(outcome, Replacement):
            return outcome
        if len(outcome.replacements) > len(command.replacements) or outcome.savings <= 0:
            return "the simulation no longer finds the same saving"
        # As upstream, the score is not taken again: the move was weighed when it was found.
        return Command(
            command.method,
            command.reason,
            still,
            outcome.replacements,
            outcome.savings,
            command.scores,
        )

    # -- execution -----------------------------------------------------------------------

    def _start(self, command: Command) -> None:
        if not self._is_leader():
            # A pass can outlast the Lease; the new leader decides from here.
            log.info("disruption: not leading any more; dropped %s", command.describe())
            return
        if self._ctx.dry_run:
            # Nothing changes in a dry run, so the same command comes back every pass: say it
            # once.
            if command.describe() == self._dry_run_logged:
                return
            self._dry_run_logged = command.describe()
        flight = self._orchestrator.start(command, self._raw_pools)
        self.history.append(flight)
        if not flight.done:
            self._in_flight.append(flight)
        else:
            self._finished(flight)

    def _advance(self, snapshot: ClusterSnapshot) -> None:
        if not self._in_flight:
            return
        claims = {str(c["metadata"]["name"]): c for c in snapshot.nodeclaims}
        for flight in self._in_flight:
            self._orchestrator.progress(flight, claims)
            if flight.done:
                self._finished(flight)
        self._in_flight = [f for f in self._in_flight if not f.done]

    def _finished(self, flight: InFlight) -> None:
        now = self._ctx.clock.monotonic()
        for name in flight.replacements:
            self._protected_until[name] = now + REPLACEMENT_GRACE
        for name in flight.deleted:
            # Until the caches show the deletion, its taint is not an abandoned one.
            self._deleted_until[name] = now + DELETION_GRACE

    def _restore_abandoned(self, snapshot: ClusterSnapshot) -> None:
        """Untaint and unmark nodes no command of this process holds: left by a process that
        died mid-command, by a leader that lost its Lease, or by a failed rollback."""
        now = self._ctx.clock.monotonic()
        self._deleted_until = {n: t for n, t in self._deleted_until.items() if t > now}
        held = {c.name for f in self._in_flight for c in f.command.candidates}
        held |= set(self._deleted_until)
        by_node = {
            str((c.get("status") or {}).get("nodeName")): c
            for c in snapshot.nodeclaims
            if (c.get("status") or {}).get("nodeName")
        }
        for node in snapshot.nodes:
            claim = by_node.get(str(node["metadata"]["name"]))
            if claim is None or (claim.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if str(claim["metadata"]["name"]) in held or is_interrupted(claim):
                continue
            if node["metadata"].get("deletionTimestamp"):
                continue
            if has_disrupted_taint(node) or condition_true(
                claim, NodeClaimConditionType.DISRUPTION_REASON
            ):
                log.info(
                    "disruption: node %s is marked by no command under way; restoring it",
                    node["metadata"]["name"],
                )
                try:
                    self._orchestrator.restore(
                        str(node["metadata"]["name"]), str(claim["metadata"]["name"])
                    )
                except ApiError as error:
                    # One node the API will not let us touch must not stop every pass.
                    log.warning(
                        "disruption: cannot restore node %s: %s", node["metadata"]["name"], error
                    )

    def reset(self) -> None:
        """Forget every command (leadership was lost and regained: another leader may have
        acted meanwhile). The next pass restores the nodes they had marked."""
        self._pending = None
        self._in_flight = []
        self._quiet_since = self._quiet_stamp = None
        self._deleted_until = {}

    @property
    def busy(self) -> bool:
        """Whether a command is waiting for validation or for its replacements."""
        return self._pending is not None or bool(self._in_flight)


def _still_candidates(command: Command, found: CandidateSet) -> list[Candidate] | str:
    """The command's candidates as found now, or why they no longer make the command: an
    emptiness command keeps those still empty, any other needs every one, unchanged."""
    by_name = {c.name: c for c in found.candidates}
    still = [by_name[c.name] for c in command.candidates if c.name in by_name]
    if command.method == EMPTINESS:
        still = [c for c in still if c.empty and c.consolidatable]
        return still or "no longer empty"
    if len(still) != len(command.candidates):
        gone = [c.name for c in command.candidates if c.name not in by_name]
        return f"no longer candidates: {', '.join(gone)} ({found.excluded.get(gone[0], '')})"
    if not all(c.consolidatable for c in still):
        return "pods arrived or left within consolidateAfter"
    return still


def _budget_used_up(
    still: Sequence[Candidate], ledger: BudgetLedger, command: Command
) -> str | None:
    """Why a NodePool's disruption budget no longer allows the command, if it does not."""
    per_pool: dict[str, int] = {}
    for candidate in still:
        per_pool[candidate.nodepool] = per_pool.get(candidate.nodepool, 0) + 1
    for pool, count in per_pool.items():
        if count > ledger.allowed(pool, command.reason):
            return f"NodePool {pool}'s budget for {command.reason.value} is used up"
    return None
