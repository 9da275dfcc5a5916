"""The report a provisioning round prints (``simulate``, ``run --once``).

Rounds are run by :class:`~.controller.ProvisioningController` under the controller runtime;
this module keeps the human-readable summary of one round and re-exports the round's types.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TextIO

from karpenter_capi.core.provisioning.nodeclaims import nodeclaim_body
from karpenter_capi.core.provisioning.provisioner import Provisioner
from karpenter_capi.core.provisioning.report import LaunchDecision, ProvisioningReport

__all__ = [
    "LaunchDecision",
    "Provisioner",
    "ProvisioningReport",
    "nodeclaim_body",
    "print_report",
]

log = logging.getLogger(__name__)


def print_report(report: ProvisioningReport, out: TextIO) -> None:
    out.write(
        f"{report.pending} provisionable pods; "
        f"{report.in_flight_pods} fit on NodeClaims already launching, "
        f"{report.existing_pods} on existing nodes\n"
    )
    for pool, error in sorted(report.nodepool_errors.items()):
        out.write(f"NodePool {pool}: {error}\n")
    for decision in report.launched:
        alternatives = len(decision.alternatives)
        out.write(
            f"NodeClaim {decision.nodeclaim}: {decision.instance_type} {decision.capacity_type} "
            f"in {decision.zone or '-'} at ${decision.price:.4f}/h for {len(decision.pods)} pods "
            f"(requests {_format_requests(decision.requests)}; "
            f"{alternatives} compatible instance type{'s' if alternatives != 1 else ''})\n"
        )
        out.write(f"    pods: {', '.join(decision.pods)}\n")
    for pod, reason in sorted(report.unschedulable.items()):
        out.write(f"cannot provision {pod}: {reason}\n")
    out.write(f"{len(report.launched)} NodeClaims, ${report.hourly_cost:.4f}/h in all\n")


def _format_requests(requests: Mapping[str, str]) -> str:
    return ", ".join(f"{name}={value}" for name, value in sorted(requests.items()))
