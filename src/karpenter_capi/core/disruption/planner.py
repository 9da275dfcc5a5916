"""One disruption pass: candidates, budgets, then the methods in order until one has a command.

Pure with respect to the API: the pass takes the cluster as already read (informer caches, or a
benchmark's synthetic cluster) and returns a ``PassReport``; the controller acts on it. That
split is what lets ``benchmarks/consolidation.py`` time exactly what the controller runs, and
the tests check decisions without an API server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.disruption.balanced import PoolTotals, pool_totals
from karpenter_capi.core.disruption.budgets import BudgetLedger
from karpenter_capi.core.disruption.candidates import (
    Candidate,
    DisruptionBudgets,
    find_candidates,
)
from karpenter_capi.core.disruption.methods import (
    DRIFT,
    EMPTINESS,
    MULTI_NODE,
    SINGLE_NODE,
    Command,
    Outcome,
    consolidation_order,
    drift,
    emptiness,
    multi_node,
    simulates,
    single_node,
)
from karpenter_capi.core.disruption.passfacts import pass_facts
from karpenter_capi.core.disruption.simulation import Simulator
from karpenter_capi.core.disruption.staticdrift import STATIC_DRIFT, static_drift
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.provisioning.state import (
    ClusterSnapshot,
    ParsedCluster,
    disrupting_nodes,
)
from karpenter_capi.core.scheduling.collector import collection_paused

DEFAULT_MULTI_NODE_SECONDS: Final = 60.0
DEFAULT_SINGLE_NODE_SECONDS: Final = 180.0
"""Upstream's limits on the two consolidation searches; far more than a pass here needs."""


@dataclass
class PassReport:
    """What one pass found: the command to run (if any) and what each method said."""

    command: Command | None = None
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)
    """Candidate NodeClaim -> why the consolidation methods that looked at it kept it."""
    budgets: dict[str, dict[str, int]] = field(default_factory=dict)
    totals: dict[str, PoolTotals] = field(default_factory=dict)
    """Each NodePool's price and move cost, what ``Balanced`` scores are shares of."""
    simulations: int = 0
    seconds: float = 0.0
    read_seconds: float = 0.0
    """Of ``seconds``, what reading the object versions no earlier pass read took (pods parsed,
    the facts of pods, Nodes and NodeClaims): the whole cluster on a first pass, what changed
    since on a later one (``passfacts.PassFacts.read_all``)."""
    objects_read: int = 0
    method_seconds: dict[str, float] = field(default_factory=dict)
    simulation_seconds: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """A JSON-able account of the pass (the benchmark prints it)."""
        return {
            "command": self.command.describe() if self.command else None,
            "method": self.command.method if self.command else None,
            "candidates": len(self.candidates),
            "excluded": len(self.excluded),
            "simulations": self.simulations,
            "seconds": round(self.seconds, 4),
            "outcomes": {
                method: outcome.describe() if isinstance(outcome, Command) else outcome
                for method, outcome in self.outcomes.items()
            },
        }


@dataclass
class PassSettings:
    spot_to_spot: bool = False
    multi_node_seconds: float = DEFAULT_MULTI_NODE_SECONDS
    single_node_seconds: float = DEFAULT_SINGLE_NODE_SECONDS
    evaluate_all: bool = False
    """Run every method even after one found a command (the benchmark's "full pass")."""


def provider_refusals(
    blocked: Callable[[list[Mapping[str, Any]]], Mapping[str, str]],
    snapshot: ClusterSnapshot,
    candidates: Sequence[Candidate],
) -> dict[str, str]:
    """Which ``candidates`` the providers refuse to remove, given in order of preference.

    The NodeClaims of nodes a command already holds (tainted, not yet deleting) are asked about
    first, so a provider counts them as leaving before it judges the candidates: two commands
    in a row cannot take a scalable resource below its min size between them.
    """
    going = disrupting_nodes(snapshot)
    held = [
        claim
        for claim in snapshot.nodeclaims
        if (claim.get("status") or {}).get("nodeName") in going
        and not (claim.get("metadata") or {}).get("deletionTimestamp")
    ]
    names = {c.name for c in candidates}
    answer = blocked([*held, *(c.nodeclaim for c in candidates)])
    return {name: why for name, why in answer.items() if name in names}


def _read(
    snapshot: ClusterSnapshot,
    inventories: Sequence[NodePoolInventory],
    pdbs: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    clock: Clock,
    protected: frozenset[str],
    blocked: Callable[[list[Mapping[str, Any]]], Mapping[str, str]] | None,
    nominations: Mapping[str, frozenset[str]] | None,
    settings: PassSettings,
    parsed: ParsedCluster | None,
) -> tuple[PassReport, BudgetLedger, dict[str, PoolTotals], Simulator | None]:
    """The pass's reading of the cluster: its candidates, budgets, totals and simulator
    (``None`` when no method would simulate anything, ``methods.simulates``)."""
    usable = [inv for inv in inventories if inv.model is not None and not inv.error]
    # What earlier passes read of each object version is kept; what this pass does not read
    # of it (objects gone) is dropped at the end of the next.
    facts = pass_facts(parsed)
    read_started, reads = clock.monotonic(), facts.reads
    if not facts.begin(snapshot):
        facts.read_all(snapshot, parsed)
    read_seconds, objects_read = clock.monotonic() - read_started, facts.reads - reads
    found = find_candidates(
        nodes=snapshot.nodes,
        nodeclaims=snapshot.nodeclaims,
        pods=snapshot.pods,
        inventories=usable,
        budgets=DisruptionBudgets(pdbs),
        now=now,
        protected=protected,
        facts=facts,
    )
    if blocked is not None and found.candidates:
        refused = provider_refusals(blocked, snapshot, consolidation_order(found.candidates))
        found.excluded.update(refused)
        found.candidates = [c for c in found.candidates if c.name not in refused]
    report = PassReport(
        candidates=found.candidates,
        excluded=found.excluded,
        read_seconds=read_seconds,
        objects_read=objects_read,
    )
    pools = {inv.nodepool: inv.model for inv in usable if inv.model is not None}
    ledger = BudgetLedger(pools, snapshot.nodeclaims, snapshot.nodes, now, facts=facts)
    report.budgets = ledger.snapshot()
    # Taken once per pass, before any command, as upstream: later moves see the same totals.
    report.totals = totals = pool_totals(
        snapshot, usable, {c.node_name: c.move_cost for c in found.candidates}, facts=facts
    )
    # No simulation without something to simulate: as upstream's ``Controller.disrupt``, which
    # moves on to the next method without ``ComputeCommand`` when ``GetCandidates`` finds none
    # its ``ShouldDisrupt`` admits (``Drifted``, ``Consolidatable``). During a scale-up no node
    # is either yet, and setting the simulator up (the solver's view of every node) was most of
    # such a pass. The methods run all the same: none reads the simulator then
    # (``methods.simulates``). The next set-up reuses what it can by version, as after a pass
    # the quiet check skipped.
    simulator = (
        Simulator(
            snapshot,
            usable,
            clock,
            spot_to_spot=settings.spot_to_spot,
            nominations=nominations,
            parsed=parsed,
        )
        if simulates(found.candidates)
        else None
    )
    facts.done_reading()  # the simulator is set up: the read's parses by pod go
    return report, ledger, totals, simulator


def plan(
    snapshot: ClusterSnapshot,
    inventories: Sequence[NodePoolInventory],
    pdbs: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    clock: Clock,
    protected: frozenset[str] = frozenset(),
    blocked: Callable[[list[Mapping[str, Any]]], Mapping[str, str]] | None = None,
    nominations: Mapping[str, frozenset[str]] | None = None,
    settings: PassSettings | None = None,
    parsed: ParsedCluster | None = None,
) -> PassReport:
    """Find this pass's command (see ``methods`` for the order).

    ``protected`` names nodes and NodeClaims to leave alone; ``nominations`` are the
    provisioner's (NodeClaim or node -> pending pod keys it launched or counted them for);
    ``blocked`` asks the providers
    which NodeClaims they cannot remove (``karpenter_capi_disruption_blocked``), see
    ``provider_refusals``; the candidates are given in the
    consolidation order so the ones they keep removable are the ones the methods prefer.
    ``parsed``: parsed pods and bound-pod sums kept across passes.
    """
    settings = settings or PassSettings()
    started = clock.monotonic()
    # Reading the cluster (candidates, totals, the simulations' view) is work in proportion to
    # its size that makes many objects and no cycle: no full collection walks the heap
    # meanwhile (``core.scheduling.collector``).
    with collection_paused():
        report, ledger, totals, simulator = _read(
            snapshot,
            inventories,
            pdbs,
            now=now,
            clock=clock,
            protected=protected,
            blocked=blocked,
            nominations=nominations,
            settings=settings,
            parsed=parsed,
        )
    usable = [inv for inv in inventories if inv.model is not None and not inv.error]

    def deadline(seconds: float) -> Callable[[], bool]:
        limit = clock.monotonic() + seconds
        return lambda: clock.monotonic() > limit

    candidates = report.candidates
    steps: tuple[tuple[str, Callable[[], Outcome]], ...] = (
        (EMPTINESS, lambda: emptiness(candidates, ledger, report.kept)),
        (
            STATIC_DRIFT,
            lambda: static_drift(
                candidates, ledger, snapshot, {inv.nodepool: inv for inv in usable}
            ),
        ),
        (DRIFT, lambda: drift(candidates, ledger, simulator)),
        (
            MULTI_NODE,
            lambda: multi_node(
                candidates,
                ledger,
                simulator,
                expired=deadline(settings.multi_node_seconds),
                kept=report.kept,
                totals=totals,
            ),
        ),
        (
            SINGLE_NODE,
            lambda: single_node(
                candidates,
                ledger,
                simulator,
                expired=deadline(settings.single_node_seconds),
                kept=report.kept,
                totals=totals,
            ),
        ),
    )
    for method, step in steps:
        step_started = clock.monotonic()
        outcome = step()
        report.method_seconds[method] = clock.monotonic() - step_started
        report.outcomes[method] = outcome
        if isinstance(outcome, Command) and report.command is None:
            report.command = outcome
            if not settings.evaluate_all:
                break
    if report.command is not None:
        for chosen in report.command.candidates:
            report.kept.pop(chosen.name, None)
    if simulator is not None:
        report.simulations = simulator.simulations
        report.simulation_seconds = list(simulator.durations)
    report.seconds = clock.monotonic() - started
    return report
