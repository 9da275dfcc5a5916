"""What the solver is given and what it answers: NodePools, nodes, proposed NodeClaims.

These are the solver's own types, decoupled from the API objects (``core.api``) and the
Kubernetes client, so the solver can be driven by the provisioner, the consolidation
simulation and the benchmark alike, with nothing but plain data. Pods come in and go out as
the API objects (``PodObject``), for binding and Events; the solver reads them only through
``podspec.PodSpec``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.instancetype import InstanceType, Offering
from karpenter_capi.core.scheduling.podspec import PodObject
from karpenter_capi.core.values.requirements import EMPTY, Requirements
from karpenter_capi.core.values.resources import ResourceList, empty
from karpenter_capi.core.values.taints import Taint


@dataclass(frozen=True)
class NodePoolOption:
    """A NodePool as the solver sees it.

    ``requirements`` hold the NodePool's ``spec.template.spec.requirements`` and its template
    labels (as ``In`` requirements). ``instance_types`` are what the providers offer for its
    NodeClass, before any filtering. ``limits`` is ``spec.limits`` (``None``: unlimited; the
    ``nodes`` resource counts nodes); ``usage`` is what the NodePool's nodes and NodeClaims
    already count against it.
    """

    name: str
    instance_types: tuple[InstanceType, ...]
    requirements: Requirements = EMPTY
    weight: int = 0
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    limits: ResourceList | None = None
    usage: ResourceList = field(default_factory=empty)


@dataclass(frozen=True)
class ExistingNode:
    """A node pods can go to without launching anything.

    A registered Node, or a NodeClaim launched but not yet registered (``in_flight``): for
    those, ``allocatable`` is the smallest instance type the claim may become, ``labels`` what
    its requirements pin and ``requirements`` all of them. ``requested`` is what pods bound to
    it (and, for a registered node, its DaemonSet pods) already take; ``pods`` are those pods,
    for topology and host ports. ``nominated`` are keys of pending pods this controller
    launched the claim for: they go back to it first.
    """

    name: str
    labels: Mapping[str, str]
    allocatable: ResourceList
    requested: ResourceList = field(default_factory=empty)
    taints: tuple[Taint, ...] = ()
    pods: Sequence[PodObject] = ()
    nodepool: str | None = None
    in_flight: bool = False
    nominated: frozenset[str] = frozenset()
    requirements: Requirements = EMPTY
    """For an in-flight NodeClaim, its requirements: a pod may go there when they are
    compatible with the pod's (its zone, say, may not be decided yet), as Karpenter checks."""
    label_requirements: Requirements | None = None
    """For a registered node, ``labels`` as requirements when already made (once per node
    version, ``state.ParsedCluster``); made from ``labels`` when not."""


@dataclass
class ProposedNodeClaim:
    """A NodeClaim the solver wants created, with the pods it is for.

    ``instance_types`` are every type that can hold ``requests`` under ``requirements``,
    cheapest compatible offering first, truncated to the solver's maximum; the provider
    launches the first it can get. ``requests`` include the DaemonSet pods that would run on
    the node (``daemon_requests``).
    """

    nodepool: NodePoolOption
    hostname: str
    requirements: Requirements
    instance_types: list[InstanceType]
    pods: list[PodObject]
    requests: ResourceList
    daemon_requests: ResourceList = field(default_factory=empty)

    def cheapest(self) -> tuple[InstanceType, Offering]:
        """The instance type and offering a launch would most likely get: the cheapest."""
        best: tuple[InstanceType, Offering] | None = None
        for instance_type in self.instance_types:
            for offering in compatible_offerings(instance_type, self.requirements):
                if best is None or offering.price < best[1].price:
                    best = (instance_type, offering)
        if best is None:
            raise ValueError(f"NodeClaim {self.hostname}: no compatible offering")
        return best

    @property
    def price(self) -> float:
        return self.cheapest()[1].price


@dataclass
class SolveResult:
    """The solver's answer.

    ``existing`` maps a node name to the pending pods placed on it; ``unschedulable`` maps a
    pod key to why no node, proposed or existing, can take it; ``timed_out`` says the solve
    stopped at its deadline, so pods it did not reach are in ``unschedulable`` to retry.
    """

    new_nodeclaims: list[ProposedNodeClaim] = field(default_factory=list)
    existing: dict[str, list[PodObject]] = field(default_factory=dict)
    unschedulable: dict[str, str] = field(default_factory=dict)
    timed_out: bool = False

    @property
    def price(self) -> float:
        """Hourly price of every proposed NodeClaim at its cheapest offering."""
        return sum(claim.price for claim in self.new_nodeclaims)


def compatible_offerings(
    instance_type: InstanceType, requirements: Requirements, *, available_only: bool = True
) -> tuple[Offering, ...]:
    """Offerings whose zone, capacity type and labels ``requirements`` allow (by default only
    the available ones)."""
    result = []
    # Read once for every offering: asked for each type of a pool when a solve starts.
    zones, capacity_types = requirements.get(_ZONE), requirements.get(_CAPACITY_TYPE)
    for offering in instance_type.offerings:
        if available_only and not offering.available:
            continue
        if zones is not None and not zones.has(offering.zone):
            continue
        if capacity_types is not None and not capacity_types.has(offering.capacity_type):
            continue
        labels = offering.labels
        if not labels or all(_allows(requirements, k, v) for k, v in labels.items()):
            result.append(offering)
    return tuple(result)


def _allows(requirements: Requirements, key: str, value: str) -> bool:
    requirement = requirements.get(key)
    return requirement is None or requirement.has(value)


_ZONE = wellknown.LABEL_TOPOLOGY_ZONE
_CAPACITY_TYPE = wellknown.LABEL_CAPACITY_TYPE
