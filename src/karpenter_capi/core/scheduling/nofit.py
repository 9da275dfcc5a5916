"""Why no instance type of a NodePool can hold a pod: the words of a FailedScheduling Event.

"no instance type meets its requirements and tolerations" is true but leaves the user to guess
which requirement of which NodePool excludes what (a zone the NodeClass never offers, a typo in
an instance type name, a capacity type no resource has). The solver only needs a yes or no, so
the explanation is computed here, once per unschedulable pod, by asking each instance type why
it is out and reporting the most common answer with an example.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.scheduling.claims import HOSTNAME_PLACEHOLDER
from karpenter_capi.core.scheduling.solver_io import compatible_offerings
from karpenter_capi.core.values.quantity import HELD_UNITS, MAX_EXPONENT
from karpenter_capi.core.values.requirements import Requirement, Requirements
from karpenter_capi.core.values.resources import ResourceList

_POSSIBLE: Final = ("excluded", "its offerings allowed are unavailable")
"""What ``why_excluded`` says of a type that meets the requirements (see there)."""


def why_excluded(
    instance_type: InstanceType,
    requirements: Requirements,
    tolerated: Callable[[InstanceType], bool],
) -> str:
    """Why ``instance_type`` cannot make a node meeting ``requirements`` (the pod's and its
    NodePool's, merged) for a pod ``tolerated`` tells about."""
    conflict = requirements.conflict_with(Requirements.from_value_sets(instance_type.requirements))
    if conflict is not None:
        return conflict.reason
    if not compatible_offerings(instance_type, requirements, available_only=False):
        allowed = [
            str(requirement)
            for key in (wellknown.LABEL_TOPOLOGY_ZONE, wellknown.LABEL_CAPACITY_TYPE)
            if (requirement := requirements.get(key)) is not None
        ]
        offered = ", ".join(f"{o.zone}/{o.capacity_type}" for o in instance_type.offerings)
        return f"none of its offerings ({offered}) meets {', '.join(allowed) or 'the requirements'}"
    if not compatible_offerings(instance_type, requirements):
        return "its offerings allowed are unavailable"
    if not tolerated(instance_type):
        return "its taints are not tolerated"
    return "excluded"


def no_type_reason(
    types: Sequence[InstanceType],
    requirements: Requirements,
    tolerated: Callable[[InstanceType], bool],
) -> str:
    """The FailedScheduling text when none of ``types`` can hold the pod."""
    head = "no instance type meets its requirements and tolerations"
    if not types:
        return f"{head}: its NodeClass offers no instance type"
    reasons = Counter(why_excluded(t, requirements, tolerated) for t in types)
    (reason, count), *others = reasons.most_common()
    share = f"all {count}" if not others else f"{count} of {len(types)}"
    return f"{head} ({share} instance types: {reason})"


def unsatisfiable_reason(types: Sequence[InstanceType], requirements: Requirements) -> str | None:
    """Why no instance type of ``types`` can ever meet a NodePool's ``requirements``, whatever
    pod comes (``None`` if one can): the NodePool's own condition, not a pod's Event."""
    if satisfying(types, requirements):
        return None
    reasons = Counter(why_excluded(t, requirements, lambda _: True) for t in types)
    (reason, count), *others = reasons.most_common()
    share = f"all {count}" if not others else f"{count} of {len(types)}"
    return f"no instance type meets its requirements ({share} instance types: {reason})"


def satisfying(types: Sequence[InstanceType], requirements: Requirements) -> list[InstanceType]:
    """The ``types`` that can make a node meeting a NodePool's ``requirements``, whether or not
    their offerings are available right now (a maximum size reached is for now, not for ever)."""
    return [t for t in types if why_excluded(t, requirements, lambda _: True) in _POSSIBLE]


def min_values_reason(types: Sequence[InstanceType], requirements: Requirements) -> str | None:
    """Which ``minValues`` of a NodePool's ``requirements`` all of its instance types together
    cannot meet, whatever pod comes (upstream launches nothing for such a pool), or ``None``."""
    values: dict[str, set[str]] = {}
    for instance_type in satisfying(types, requirements):
        for key, allowed in instance_type.requirements.items():
            values.setdefault(key, set()).update(allowed)
    refusal = requirements.min_values_problem(values)
    return None if refusal is None else refusal.reason


def no_room_reason(limits: ResourceList, types: Sequence[InstanceType]) -> str | None:
    """Which of a NodePool's ``limits`` leave room for no node of ``types`` (its instance types
    that meet its requirements) even with nothing launched yet, naming the smallest type's size;
    ``None`` when one node fits. Limits cap the capacity of all the pool's nodes together, as
    upstream counts them, and ``nodes`` their number."""
    if not limits or not types:
        return None

    def over(instance_type: InstanceType, name: str) -> bool:
        if name == "nodes":
            return limits.milli(name) < 1000
        return instance_type.capacity.milli(name) > limits.milli(name)

    if any(not any(over(t, name) for name in limits) for t in types):
        return None
    said = []
    for name in sorted(limits):
        if not all(over(t, name) for t in types):
            continue
        if name == "nodes":
            said.append(f"limits.nodes {limits[name]} leaves room for no node")
            continue
        smallest = min(types, key=lambda t: (t.capacity.milli(name), t.name))
        said.append(
            f"limits.{name} {limits[name]} leaves room for no node: the smallest instance type "
            f"({smallest.name}) has {smallest.capacity[name]}"
        )
    if not said:
        written = ", ".join(f"{name} {limits[name]}" for name in sorted(limits))
        said.append(
            f"limits {written} leave room for no node together: each instance type is over one"
        )
    return "; ".join(said)


def too_small_reason(types: Sequence[InstanceType], needed: ResourceList) -> str:
    """The FailedScheduling text when the pod (with its DaemonSets) fits none of ``types``:
    the resources it asks for more of than the largest type allocates."""
    head = "no instance type is large enough for its requests"
    largest = ResourceList()
    for instance_type in types:
        largest = largest.max_merge(instance_type.allocatable)
    short = []
    for name in needed:
        have = largest.milli(name)
        if needed.milli(name) <= have:
            continue
        # A request held at the bound (``1e400``) is quoted as such, not as a number never written.
        held = needed.value(name) >= HELD_UNITS
        want = f"10^{MAX_EXPONENT} or more" if held else str(needed[name])
        if have <= 0:
            short.append(f"{name} {want} (no instance type has {name})")
        else:
            short.append(f"{name} {want} (the most any allocates is {largest[name]})")
    return f"{head}: {'; '.join(short)}" if short else head


def named_node_reason(requirement: Requirement, hostnames: Collection[str]) -> str | None:
    """The FailedScheduling text when ``requirement`` (the pod's ``kubernetes.io/hostname``)
    excludes every node Karpenter could launch, or ``None`` when a new node may do;
    ``hostnames`` are the nodes that exist."""
    if requirement.has(HOSTNAME_PLACEHOLDER):
        return None
    fix = f"name a node that exists or remove the {requirement.key} selector or affinity"
    if requirement.complement or not requirement.values:
        return f"{requirement}: every node has a hostname, so no node can take it ({fix})"
    named = sorted(requirement.values)
    if not any(name in hostnames for name in named):
        return (
            f"{requirement}: no node of that name exists, and a new node cannot be given a "
            f"name in advance ({fix})"
        )
    return (
        f"{requirement}: only the node(s) it names can take it, and a new node cannot be "
        "given one of those names"
    )
