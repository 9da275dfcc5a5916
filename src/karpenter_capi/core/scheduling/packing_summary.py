"""What a round's re-packing stage decided, in the words a user reads.

Why it exists: the re-packing stage (``repack.py``, ``packing.py``) answers per family of
NodeClaims with a ``PackingOutcome`` made for code (a status, costs, counts). A user whose
scale-up stayed greedy wants one sentence saying why: the stage re-packed and saved so much
against greedy's plan, found nothing cheaper, refused cheaper plans kube-scheduler could
strand a pod on, or was stopped by its budget. The provisioner logs that sentence once per
change and ``karpenter-capi explain`` prints it; both read the ``PackingSummary`` made here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from karpenter_capi.core.scheduling.packing_problem import PackingOutcome

RE_PACKED: Final = "re-packed"
NOT_CHEAPER: Final = "not-cheaper"
REFUSED: Final = "refused"
STOPPED_BY_BUDGET: Final = "stopped-by-budget"
TIMED_OUT: Final = "timed-out"
TOO_LARGE: Final = "too-large"

# The optimizer's statuses, mapped to what the user is told: its counted work budget spent
# (the same on any machine) or its CPU-time safety net struck (a machine too loaded).
_OUTCOME: Final = {
    "improved": RE_PACKED,
    "not-cheaper": NOT_CHEAPER,
    "voided": NOT_CHEAPER,
    "not-robust": REFUSED,
    "budget-exhausted": STOPPED_BY_BUDGET,
    "timed-out": TIMED_OUT,
    "too-large": TOO_LARGE,
}
# When families end differently and none was re-packed, the round is told by the one that
# says most about why greedy's plan stayed.
_PRECEDENCE: Final = (TIMED_OUT, STOPPED_BY_BUDGET, REFUSED, TOO_LARGE, NOT_CHEAPER)


@dataclass(frozen=True)
class PackingSummary:
    """One round's re-packing: ``outcome`` (``re-packed``, ``not-cheaper``, ``refused``,
    ``stopped-by-budget``, ``timed-out``, ``too-large``), what greedy's plan and the plan used
    cost per hour for the NodeClaims it looked at, and ``reason``, the sentence a user reads."""

    outcome: str
    greedy_cost: float
    cost: float
    reason: str

    @property
    def saved(self) -> float:
        return max(self.greedy_cost - self.cost, 0.0)

    def as_dict(self) -> dict[str, object]:
        return {
            "outcome": self.outcome,
            "greedyCost": round(self.greedy_cost, 4),
            "cost": round(self.cost, 4),
            "saved": round(self.saved, 4),
            "reason": self.reason,
        }


def summarize(outcomes: Sequence[PackingOutcome]) -> PackingSummary | None:
    """The round's summary of ``outcomes`` (one per family), or ``None`` when the stage did
    not run (no family it may touch, or turned off)."""
    judged = [o for o in outcomes if o.status != "disabled"]
    if not judged:
        return None
    greedy = sum(o.greedy_cost for o in judged)
    improved = [o for o in judged if o.status == "improved" and o.cost is not None]
    cost = greedy - sum(o.greedy_cost - (o.cost or 0.0) for o in improved)
    kept = [o for o in judged if o not in improved]
    if improved:
        reason = (
            f"re-packed {_families(len(improved))}: saved ${greedy - cost:.4f}/h against "
            f"greedy's plan (${greedy:.4f}/h -> ${cost:.4f}/h)"
        )
        if kept:
            reason += f"; kept greedy's for {_families(len(kept))}: {_why(kept)}"
        return PackingSummary(RE_PACKED, greedy, cost, reason)
    outcome = next(
        (o for o in _PRECEDENCE if any(_outcome(k) == o for k in kept)),
        _outcome(kept[0]),
    )
    return PackingSummary(
        outcome, greedy, greedy, f"kept greedy's plan (${greedy:.4f}/h): {_why(kept)}"
    )


def _outcome(outcome: PackingOutcome) -> str:
    """What the user is told; a status this module does not know yet is told as it is."""
    return _OUTCOME.get(outcome.status, outcome.status)


def _families(count: int) -> str:
    return "1 group of NodeClaims" if count == 1 else f"{count} groups of NodeClaims"


def _why(outcomes: Sequence[PackingOutcome]) -> str:
    """Each distinct reason among ``outcomes``, most telling first."""
    reasons: list[str] = []
    for kind in _PRECEDENCE:
        found = [o for o in outcomes if _outcome(o) == kind]
        if found:
            reasons.append(_reason(kind, found))
    reasons.extend(sorted({_outcome(o) for o in outcomes} - set(_PRECEDENCE)))
    return "; ".join(reasons)


def _reason(kind: str, outcomes: Sequence[PackingOutcome]) -> str:
    rejected = sum(o.rejected for o in outcomes)
    refused = (
        f"{rejected} cheaper plan(s) refused because kube-scheduler could strand pods on them, "
        "which would cost no less than greedy's plan at worst"
    )
    if kind == STOPPED_BY_BUDGET:
        said = "the re-packing was stopped by its budget before it found a cheaper plan"
        return f"{said} ({refused})" if rejected else said
    if kind == TIMED_OUT:
        said = (
            "the solver's CPU-time safety net stopped it (the machine is too loaded, or "
            "--packing-optimizer-budget too short)"
        )
        return f"{said} ({refused})" if rejected else said
    if kind == REFUSED:
        return refused
    if kind == TOO_LARGE:
        return "too many instance types, pod shapes or pods to re-pack"
    bounds = [o.lower_bound for o in outcomes]
    if any(o.status == "voided" for o in outcomes):
        return (
            "the cheaper plan found is not cheaper once its NodeClaims list the instance "
            "types the NodePool's limits allow"
        )
    if all(b is not None for b in bounds) and bounds:
        floor = sum(b for b in bounds if b is not None)
        if floor >= sum(o.greedy_cost for o in outcomes) * (1 - 1e-6):
            return "greedy's plan is already the cheapest"
        return f"no cheaper plan found (none can cost less than ${floor:.4f}/h)"
    return "no cheaper plan found"
