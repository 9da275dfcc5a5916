"""What a provisioning round reports: the NodeClaims it launched and why pods stayed pending.

Kept apart from :mod:`.provisioner`, which decides and writes, because the report is what the
rest of the program reads of a round (the controller, ``simulate``'s printout, the scenario
checks): they depend on these types, not on how a round is run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from karpenter_capi.core.scheduling.packing_summary import PackingSummary
from karpenter_capi.core.scheduling.solver_io import ProposedNodeClaim


@dataclass(frozen=True)
class LaunchDecision:
    """A NodeClaim this round created, and what it expects to get."""

    nodeclaim: str
    nodepool: str
    instance_type: str
    zone: str
    capacity_type: str
    price: float
    pods: tuple[str, ...]
    requests: Mapping[str, str]
    alternatives: tuple[str, ...]


@dataclass
class ProvisioningReport:
    launched: list[LaunchDecision] = field(default_factory=list)
    unschedulable: dict[str, str] = field(default_factory=dict)  # pod key -> why
    placed: dict[str, str] = field(default_factory=dict)
    """Pending pod key -> the node or launching NodeClaim the round counted it on."""
    nodepool_errors: dict[str, str] = field(default_factory=dict)
    unreachable_nodepools: set[str] = field(default_factory=set)
    """The NodePools of ``nodepool_errors`` whose error was a server away (``unreachable``)."""
    pending: int = 0
    in_flight_pods: int = 0
    existing_pods: int = 0
    timed_out: bool = False
    packing: PackingSummary | None = None
    """What the re-packing stage decided, when it ran (``packing_summary.py``)."""

    @property
    def hourly_cost(self) -> float:
        return sum(decision.price for decision in self.launched)


def launch_decision(name: str, claim: ProposedNodeClaim, pods: tuple[str, ...]) -> LaunchDecision:
    """What the round says it launched: ``claim``'s cheapest offering, created as ``name``
    for ``pods``."""
    instance_type, offering = claim.cheapest()
    return LaunchDecision(
        nodeclaim=name,
        nodepool=claim.nodepool.name,
        instance_type=instance_type.name,
        zone=offering.zone,
        capacity_type=offering.capacity_type,
        price=offering.price,
        pods=pods,
        requests=claim.requests.to_dict(),
        alternatives=tuple(it.name for it in claim.instance_types),
    )
