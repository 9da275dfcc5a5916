"""What the re-packing stage decided over a run's provisioning rounds (issue 25, item 7).

A scenario's cost alone does not say whether a round's plan stayed greedy and why; the
provisioner puts each round's re-packing outcome on its report (``core.scheduling.
packing_summary``), and this observer, called by the runtime after every reconcile, collects
the outcome of each round that ran the stage. No API request, no log level to lower.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from karpenter_capi.core.provisioning.controller import ProvisioningController
from karpenter_capi.core.provisioning.report import ProvisioningReport
from karpenter_capi.core.scheduling.packing_summary import PackingSummary


@dataclass
class RepackingRounds:
    """A ``ReconcileObserver`` of the provisioning controller; ``figures()`` sums it up."""

    provisioning: ProvisioningController
    rounds: list[PackingSummary] = field(default_factory=list)
    _seen: ProvisioningReport | None = None

    def on_reconcile(self, controller: str, seconds: float, error: BaseException | None) -> None:
        report = self.provisioning.last_report
        if controller != self.provisioning.name or report is None or report is self._seen:
            return
        self._seen = report
        if report.packing is not None:
            self.rounds.append(report.packing)

    def on_queue_depth(self, controller: str, depth: int) -> None:
        return None

    def figures(self) -> dict[str, Any]:
        """``rounds`` that ran the stage, ``by_outcome`` (outcome to rounds), ``saved_per_hour``
        (summed over the rounds, against each one's greedy plan) and ``last_reason``."""
        if not self.rounds:
            return {}
        by_outcome: dict[str, int] = {}
        for summary in self.rounds:
            by_outcome[summary.outcome] = by_outcome.get(summary.outcome, 0) + 1
        return {
            "rounds": len(self.rounds),
            "by_outcome": by_outcome,
            "saved_per_hour": round(sum(s.saved for s in self.rounds), 4),
            "last_reason": self.rounds[-1].reason,
        }
