"""The loop that repeats provisioning rounds, and the report a round prints.

Each tick it looks at the pending pods, feeds them to the batching window, and runs a round
(:class:`~.provisioner.Provisioner`) when the window closes. The controller runtime (informers,
work queues, leader election) replaces this polling loop in the runtime issue; the round itself
stays.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TextIO

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.plugins import Plugins
from karpenter_capi.core.provisioning.batcher import Batcher
from karpenter_capi.core.provisioning.provisioner import (
    LaunchDecision,
    Provisioner,
    ProvisioningReport,
    nodeclaim_body,
)
from karpenter_capi.core.provisioning.state import ClusterSnapshot
from karpenter_capi.core.scheduling.model import pod_key

__all__ = [
    "LaunchDecision",
    "Provisioner",
    "ProvisioningReport",
    "nodeclaim_body",
    "print_report",
    "run_provisioning",
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


def run_provisioning(
    client: KubeClient,
    plugins: Plugins,
    *,
    clock: Clock,
    interval: float,
    once: bool,
    out: TextIO,
    stop: threading.Event | None = None,
    batcher: Batcher | None = None,
) -> int:
    """Poll every ``interval`` seconds; run a round whenever the batching window closes.

    ``once`` runs a single round immediately, without waiting for a window.
    """
    provisioner = Provisioner(client, plugins, clock)
    if once:
        print_report(provisioner.reconcile(), out)
        out.flush()
        return 0
    batcher = batcher or Batcher(clock)
    stop = stop or threading.Event()
    while True:
        snapshot = ClusterSnapshot.read(client)
        batcher.observe(pod_key(p) for p in provisioner.pending_pods(snapshot))
        if batcher.ready():
            batcher.reset()
            report = provisioner.reconcile()
            if report.launched or report.unschedulable or report.nodepool_errors:
                print_report(report, out)
                out.flush()
        if stop.wait(interval):
            return 0
