"""The four ways a node is disrupted voluntarily, tried in upstream Karpenter's order.

1. **Emptiness**: every consolidatable empty candidate (no pod that costs anything to move,
   ``Candidate.empty``), as many as the budgets allow, in one command (nothing to simulate).
   Between it and drift, upstream's static drift (``staticdrift``) replaces drifted nodes of
   static NodePools one for one; the methods here leave static NodePools' nodes alone.
2. **Drift**: a drifted candidate (provider drift, NodePool template hash, requirements no
   longer met), one at a time, its replacements launched before it drains; a drifted candidate
   without pods is simply deleted.
3. **Multi-node consolidation**: the longest prefix of the candidates, ranked by savings per
   unit of disruption, whose pods fit on the rest of the cluster plus new nodes cheaper than
   the prefix in total (N->M: upstream allows at most one), found by binary search over at
   most 100 candidates.
4. **Single-node consolidation**: the first candidate, in the same order, that can be deleted
   or replaced by cheaper nodes (one, or several smaller ones: 1->N, beyond upstream's 1->1).

The first method that yields a command wins the pass. ``consolidationPolicy: WhenEmpty`` keeps a
NodePool's non-empty nodes out of 3 and 4; ``Balanced`` lets them in, but a move must also pass
``balanced``'s score for every ``Balanced`` NodePool it takes nodes from (single-node skips, with
no simulation, a candidate even whose deletion would not pass); empty nodes are emptiness's
alone, under the ``Empty`` budget, as upstream. ``consolidateAfter`` is the ``Consolidatable``
condition each candidate carries (``conditions``).

Besides its outcome, each consolidation method writes into ``kept`` (NodeClaim name -> words for
a user) why a consolidatable candidate it looked at stays: the ``Unconsolidatable`` Events and
``karpenter-capi explain`` show those reasons as the planner found them, never reconstructed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from karpenter_capi.core.api.nodepool import ConsolidationPolicy, DisruptionReason
from karpenter_capi.core.disruption.balanced import (
    PoolTotals,
    Score,
    delete_bound,
    rejected,
    score_move,
)
from karpenter_capi.core.disruption.budgets import BudgetLedger
from karpenter_capi.core.disruption.candidates import Candidate
from karpenter_capi.core.disruption.simulation import Replacement, Simulator
from karpenter_capi.core.scheduling.solver_io import ProposedNodeClaim

MAX_MULTI_NODE_CANDIDATES: Final = 100
EMPTINESS: Final = "emptiness"
DRIFT: Final = "drift"
MULTI_NODE: Final = "multi-node-consolidation"
SINGLE_NODE: Final = "single-node-consolidation"
NO_ROOM: Final = (
    "its pods fit neither on the other nodes nor on new nodes cheaper than it "
    "(cpu, memory or pod slots)"
)


@dataclass
class Command:
    """Disrupt ``candidates`` for ``reason``, launching ``replacements`` first."""

    method: str
    reason: DisruptionReason
    candidates: list[Candidate]
    replacements: list[ProposedNodeClaim] = field(default_factory=list)
    savings: float = 0.0
    scores: dict[str, Score] = field(default_factory=dict)
    """The score each ``Balanced`` NodePool gave the move (none for other policies)."""

    @property
    def decision(self) -> str:
        """``delete`` or ``replace``, the label of the decisions metric."""
        return "replace" if self.replacements else "delete"

    def describe(self) -> str:
        pods = sum(len(c.pods) for c in self.candidates)
        names = ", ".join(c.name for c in self.candidates[:5])
        more = f" and {len(self.candidates) - 5} more" if len(self.candidates) > 5 else ""
        text = (
            f"{self.decision} {len(self.candidates)} node(s) ({names}{more}, {pods} pods) "
            f"for {self.reason.value}"
        )
        if self.replacements:
            types = ", ".join(r.cheapest()[0].name for r in self.replacements[:5])
            extra = len(self.replacements) - 5
            text += f", launching {types}" + (f" and {extra} more" if extra > 0 else "")
        text = f"{text}; saves {self.savings:.4f}/h"
        for pool, score in sorted(self.scores.items()):
            text += f"; NodePool {pool} (Balanced): {score.summary()}"
        return text


Outcome = Command | str | None
"""What a method found: a command, why it found none (for reports), or None (no candidates)."""


def consolidation_order(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Highest price per unit of move cost first (upstream's ``SavingsRatio``, every policy):
    an expensive node with few pods leads, so a budget-limited pass makes the moves worth most."""
    return sorted(candidates, key=lambda c: (-c.savings_ratio, c.name))


def _within_budget(
    candidates: Sequence[Candidate], ledger: BudgetLedger, reason: DisruptionReason
) -> list[Candidate]:
    """The longest run of ``candidates`` each NodePool's allowance covers, in order."""
    used: dict[str, int] = {}
    result = []
    for candidate in candidates:
        if used.get(candidate.nodepool, 0) < ledger.allowed(candidate.nodepool, reason):
            used[candidate.nodepool] = used.get(candidate.nodepool, 0) + 1
            result.append(candidate)
    return result


def _budget_exhausted(candidate: Candidate, reason: DisruptionReason) -> str:
    return (
        f"the disruption budget of NodePool {candidate.nodepool} allows no more "
        f"{reason.value} disruptions now"
    )


def _keep(kept: dict[str, str] | None, candidate: Candidate, why: str) -> None:
    # The first method to speak about a candidate explains it best: later ones only repeat.
    if kept is not None:
        kept.setdefault(candidate.name, why)


def _consolidatable(candidate: Candidate) -> bool:
    if candidate.pool.is_static:
        return False  # static NodePools keep their count; ``staticdrift`` replaces their nodes
    after = candidate.pool.spec.disruption.consolidate_after
    return candidate.consolidatable and not after.is_never


def simulates(candidates: Sequence[Candidate]) -> bool:
    """Whether a method may simulate anything for ``candidates``: drift for a drifted node of
    a NodePool that is not static, consolidation for a consolidatable one. Without either, no
    method reads the simulator (as upstream, whose methods find no candidate then: each one's
    ``ShouldDisrupt`` asks for the ``Drifted`` or the ``Consolidatable`` condition)."""
    return any((c.drifted and not c.pool.is_static) or _consolidatable(c) for c in candidates)


def _needed(simulator: Simulator | None) -> Simulator:
    """The simulator a method is about to use; only ``None`` when ``simulates`` said no."""
    if simulator is None:
        raise AssertionError("a disruption method simulates, but the pass set no simulator up")
    return simulator


def emptiness(
    candidates: Sequence[Candidate], ledger: BudgetLedger, kept: dict[str, str] | None = None
) -> Outcome:
    empty = [c for c in candidates if c.empty and _consolidatable(c)]
    if not empty:
        return None
    chosen = _within_budget(
        sorted(empty, key=lambda c: (-c.price, c.name)), ledger, DisruptionReason.EMPTY
    )
    names = {c.name for c in chosen}
    for candidate in empty:
        if candidate.name not in names:
            _keep(kept, candidate, _budget_exhausted(candidate, DisruptionReason.EMPTY))
    if not chosen:
        return f"{len(empty)} empty node(s), no budget left"
    return Command(EMPTINESS, DisruptionReason.EMPTY, chosen, savings=sum(c.price for c in chosen))


def drift(
    candidates: Sequence[Candidate], ledger: BudgetLedger, simulator: Simulator | None
) -> Outcome:
    drifted = [c for c in candidates if c.drifted and not c.pool.is_static]
    if not drifted:
        return None
    # Literally without pods, as upstream's drift: an expendable pod still gets a new home first.
    empty = _within_budget([c for c in drifted if not c.pods], ledger, DisruptionReason.DRIFTED)
    if empty:
        return Command(DRIFT, DisruptionReason.DRIFTED, empty, savings=0.0)
    why = "no budget left"
    for candidate in sorted(drifted, key=lambda c: (c.disruption_cost, c.name)):
        if not _within_budget([candidate], ledger, DisruptionReason.DRIFTED):
            continue
        simulation = _needed(simulator).simulate([candidate])
        if not simulation.all_scheduled:
            key, reason = next(iter(sorted(simulation.unschedulable.items())))
            why = f"{candidate.name}: pod {key} would not schedule: {reason}"
            continue
        if simulation.pending_only:
            why = f"{candidate.name}: pending pods need new capacity first"
            continue
        replacements = simulation.new_nodeclaims
        savings = candidate.price - sum(r.price for r in replacements)
        return Command(DRIFT, DisruptionReason.DRIFTED, [candidate], replacements, savings)
    return f"{len(drifted)} drifted node(s): {why}"


def _underutilized(
    candidates: Sequence[Candidate], kept: dict[str, str] | None = None
) -> list[Candidate]:
    result = []
    for candidate in candidates:
        if not _consolidatable(candidate):
            continue
        if candidate.empty:
            continue  # emptiness's, under the Empty budget
        policy = candidate.pool.spec.disruption.consolidation_policy
        if policy != ConsolidationPolicy.WHEN_EMPTY:
            result.append(candidate)
        else:
            _keep(
                kept,
                candidate,
                f"NodePool {candidate.nodepool} consolidates only empty nodes "
                f"(consolidationPolicy {policy.value}) and this one has "
                f"{len(candidate.pods)} pod(s)",
            )
    return consolidation_order(result)


def _eligible(
    candidates: Sequence[Candidate], ledger: BudgetLedger, kept: dict[str, str] | None
) -> list[Candidate]:
    """The underutilized candidates the budgets allow, each other one kept with its reason."""
    underutilized = _underutilized(candidates, kept)
    eligible = _within_budget(underutilized, ledger, DisruptionReason.UNDERUTILIZED)
    names = {c.name for c in eligible}
    for candidate in underutilized:
        if candidate.name not in names:
            _keep(kept, candidate, _budget_exhausted(candidate, DisruptionReason.UNDERUTILIZED))
    return eligible


def _command(
    method: str, chosen: Sequence[Candidate], outcome: Replacement, scores: dict[str, Score]
) -> Command:
    return Command(
        method,
        DisruptionReason.UNDERUTILIZED,
        list(chosen),
        outcome.replacements,
        outcome.savings,
        scores,
    )


def _move(outcome: Replacement) -> str:
    count = len(outcome.replacements)
    if count > 1:
        return f"replacing it with {count} cheaper nodes"
    return "replacing it with one cheaper node" if count else "deleting it"


def multi_node(
    candidates: Sequence[Candidate],
    ledger: BudgetLedger,
    simulator: Simulator | None,
    *,
    expired: Callable[[], bool] = lambda: False,
    kept: dict[str, str] | None = None,
    totals: Mapping[str, PoolTotals] | None = None,
) -> Outcome:
    """Binary search for the longest prefix that consolidates (upstream's approach); with a
    ``Balanced`` NodePool among the prefix's, it must also pass that NodePool's score against
    ``totals`` (``balanced.pool_totals``).

    A prefix that fails says nothing about one node, so only the budget reasons go to ``kept``.
    """
    eligible = _eligible(candidates, ledger, kept)[:MAX_MULTI_NODE_CANDIDATES]
    if len(eligible) < 2:
        return None
    low, high = 2, len(eligible)
    best: Command | None = None
    why = "no prefix of two or more nodes consolidates"
    while low <= high and not expired():
        middle = (low + high) // 2
        outcome = _needed(simulator).consolidate(eligible[:middle])
        refusal = None
        if isinstance(outcome, Replacement) and outcome.savings > 0:
            scores = score_move(eligible[:middle], outcome.savings, totals or {})
            refusal = rejected(scores.values())
            if refusal is None:
                best = _command(MULTI_NODE, eligible[:middle], outcome, scores)
                low = middle + 1
                continue
        if isinstance(outcome, str):
            why = f"{middle} nodes: {outcome}"
        elif refusal is not None:
            why = f"{middle} nodes: {refusal.rejection('removing them')}"
        high = middle - 1
    return best if best is not None else why


def single_node(
    candidates: Sequence[Candidate],
    ledger: BudgetLedger,
    simulator: Simulator | None,
    *,
    expired: Callable[[], bool] = lambda: False,
    kept: dict[str, str] | None = None,
    totals: Mapping[str, PoolTotals] | None = None,
) -> Outcome:
    """The first candidate that consolidates alone; each one before it is kept with the
    reason its own simulation (or the quick resource check, or its ``Balanced`` score) gave.

    A ``Balanced`` candidate whose deletion outright would not pass its score is kept without a
    simulation: any replacement would save less (upstream's ``CanPassThreshold``)."""
    eligible = _eligible(candidates, ledger, kept)
    if not eligible:
        return None
    tried = 0
    for index, candidate in enumerate(eligible):
        if expired():
            for later in eligible[index:]:
                _keep(kept, later, "not evaluated: single-node consolidation ran out of time")
            return f"timed out after {tried} of {len(eligible)} candidates"
        bound = delete_bound(candidate, totals or {})
        if bound is not None and not bound.approved:
            _keep(kept, candidate, f"even {bound.rejection('deleting it')}")
            continue
        if not _needed(simulator).might_consolidate(candidate):
            _keep(kept, candidate, NO_ROOM)
            continue
        tried += 1
        outcome = _needed(simulator).consolidate([candidate])
        if isinstance(outcome, Replacement) and outcome.savings > 0:
            scores = score_move([candidate], outcome.savings, totals or {})
            refusal = rejected(scores.values())
            if refusal is None:
                return _command(SINGLE_NODE, [candidate], outcome, scores)
            _keep(kept, candidate, refusal.rejection(_move(outcome)))
            continue
        _keep(kept, candidate, outcome if isinstance(outcome, str) else "it would save nothing")
    return f"none of {len(eligible)} candidates consolidates ({tried} simulated)"
