"""The parts of a pod's scheduling constraints that are more than requirements, as values.

Why a module of its own: the topology builds its groups from these terms, relaxation gives them
up one at a time, and the parser (``podspec``) makes them; none of the three should read the
pod's JSON again, and none should depend on the others. Each is frozen and hashable, so a pod's
constraints can key a cache directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from karpenter_capi.core.values.requirements import Requirements
from karpenter_capi.core.values.selectors import CompiledSelector


@dataclass(frozen=True, slots=True)
class NodeTerm:
    """One of the ORed ``nodeSelectorTerms`` of a pod's required node affinity.

    ``requirements`` are its ``matchExpressions``. ``pins_node`` says it can never match a new
    node: it selects by ``matchFields`` (an existing node's name) or is empty (Kubernetes: it
    selects no node at all).
    """

    requirements: Requirements
    pins_node: bool


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """One pod (anti-)affinity term.

    ``selector`` is its ``labelSelector`` with the owner's ``matchLabelKeys`` and
    ``mismatchLabelKeys`` values already added (a nil or malformed selector selects nothing).
    ``namespaces`` are the namespaces it lists; ``namespace_selector`` is ``None`` when it has
    none (then the listed namespaces, or the owner's own, are searched).
    """

    topology_key: str
    selector: CompiledSelector
    namespaces: tuple[str, ...]
    namespace_selector: CompiledSelector | None


@dataclass(frozen=True, slots=True)
class Spread:
    """One topology spread constraint.

    ``selector`` holds the owner's ``matchLabelKeys`` values; ``schedule_anyway`` is
    ``whenUnsatisfiable: ScheduleAnyway`` (a preference, enforced until relaxation drops it);
    ``honor_affinity`` and ``honor_taints`` are the ``nodeAffinityPolicy`` and
    ``nodeTaintsPolicy`` (defaults ``Honor`` and ``Ignore``).
    """

    topology_key: str
    max_skew: int
    min_domains: int | None
    schedule_anyway: bool
    selector: CompiledSelector
    honor_affinity: bool
    honor_taints: bool
