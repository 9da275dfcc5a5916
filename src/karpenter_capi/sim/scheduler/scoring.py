"""How kube-scheduler's default profile ranks the nodes a pod fits on, as plain arithmetic.

Filtering says where a pod *can* go; scoring decides where it *does* go, and that is what makes
a provisioning plan hold or fail. kube-scheduler's default profile (v1.30 and later) spreads
pods: NodeResourcesFit scores the least allocated node highest, so of two nodes the small pods
created first land on the emptier one, which may be the node the autoprovisioner meant for a
big pod. A stand-in that packed by name order instead would hide exactly that.

Each Score plugin gives every feasible node 0..100 (after its own normalization); the node's
total is the weighted sum with the default weights below, and the highest total wins, ties
broken uniformly at random (kube's ``selectHost`` reservoir sampling) with the caller's seeded
generator. Written from the Kubernetes sources' behaviour (``pkg/scheduler/framework/plugins``
and ``apis/config/v1/default_plugins.go``), sharing nothing with ``core.scheduling``.

Left out: ImageLocality (weight 1; the stand-in has no image state, so it would add the same
0 everywhere), VolumeBinding's capacity scoring (no volumes), and percentageOfNodesToScore
(kube scores only a sample of the feasible nodes in clusters of more than 100 nodes; the
stand-in scores them all).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Final

MAX_NODE_SCORE: Final = 100

# The default profile's Score plugins and weights (``getDefaultPlugins``, MultiPoint).
FIT_WEIGHT: Final = 1  # NodeResourcesFit, LeastAllocated over cpu and memory (1 each)
BALANCED_WEIGHT: Final = 1  # NodeResourcesBalancedAllocation
TAINT_WEIGHT: Final = 3  # TaintToleration
NODE_AFFINITY_WEIGHT: Final = 2  # NodeAffinity
SPREAD_WEIGHT: Final = 2  # PodTopologySpread
INTERPOD_WEIGHT: Final = 2  # InterPodAffinity

HARD_POD_AFFINITY_WEIGHT: Final = 1
"""InterPodAffinity's ``hardPodAffinityWeight``: an existing pod's *required* affinity term
that the incoming pod matches counts like a preferred term of this weight."""

# PodTopologySpread's system default constraints (``defaultingType: System``), applied to pods
# without constraints of their own that a ReplicaSet, StatefulSet or ReplicationController owns.
DEFAULT_HOSTNAME_MAX_SKEW: Final = 3
DEFAULT_ZONE_MAX_SKEW: Final = 5


def least_allocated(cpu: int, memory: int, cpu_allocatable: int, memory_allocatable: int) -> int:
    """NodeResourcesFit's LeastAllocated over cpu and memory (weight 1 each), 0..100.

    Per resource, the share left free after placing the pod, ``(allocatable - requested) x
    100 / allocatable`` rounded down (0 when over); the two are averaged, rounded down. A
    resource the node has none of is left out of the average rather than scored 0.
    """
    total = weights = 0
    for requested, allocatable in ((cpu, cpu_allocatable), (memory, memory_allocatable)):
        if allocatable > 0:
            weights += 1
            if requested <= allocatable:
                total += (allocatable - requested) * MAX_NODE_SCORE // allocatable
    return total // weights if weights else 0


def balanced_allocation(
    cpu: int, memory: int, cpu_allocatable: int, memory_allocatable: int
) -> int:
    """NodeResourcesBalancedAllocation over cpu and memory: (1 - standard deviation) x 100.

    The deviation is that of the requested fractions of allocatable (each capped at 1); for
    two resources it is half their difference. With one resource (or none) the node has, 100.
    """
    if cpu_allocatable <= 0 or memory_allocatable <= 0:
        return MAX_NODE_SCORE
    cpu_fraction = min(1.0, cpu / cpu_allocatable)
    memory_fraction = min(1.0, memory / memory_allocatable)
    return int((1 - abs(cpu_fraction - memory_fraction) / 2) * MAX_NODE_SCORE)


def normalize_to_max(scores: Sequence[int], *, reverse: bool = False) -> list[int]:
    """The framework's ``DefaultNormalizeScore``: scale so the highest is 100 (or reverse it).

    TaintToleration reverses it (fewer untolerated PreferNoSchedule taints is better);
    NodeAffinity does not. With every score 0, reversed scores are all 100 and plain ones 0.
    """
    highest = max(scores, default=0)
    if highest <= 0:
        return [MAX_NODE_SCORE if reverse else 0 for _ in scores]
    scaled = [MAX_NODE_SCORE * score // highest for score in scores]
    return [MAX_NODE_SCORE - s for s in scaled] if reverse else scaled


def normalize_min_max(scores: Sequence[int]) -> list[int]:
    """InterPodAffinity's normalization: the lowest total maps to 0 and the highest to 100."""
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high == low:
        return [0 for _ in scores]
    return [int(MAX_NODE_SCORE * ((score - low) / (high - low))) for score in scores]


def topology_weight(domains: int) -> float:
    """How much one matching pod counts in a topology of ``domains`` values: log(n + 2)."""
    return math.log(domains + 2)


def round_half_away(value: float) -> int:
    """Go's ``math.Round`` (half away from zero), which PodTopologySpread rounds raw scores by."""
    return int(math.copysign(math.floor(abs(value) + 0.5), value))


def normalize_spread(scores: Sequence[int | None]) -> list[int]:
    """PodTopologySpread's normalization: fewer matching pods scores higher.

    ``None`` marks a node missing one of the constraints' topology keys: it scores 0 and takes
    no part in the minimum and maximum.
    """
    counted = [s for s in scores if s is not None]
    low, high = min(counted, default=0), max(counted, default=0)
    normalized = []
    for score in scores:
        if score is None:
            normalized.append(0)
        elif high == 0:
            normalized.append(MAX_NODE_SCORE)
        else:
            normalized.append(MAX_NODE_SCORE * (high + low - score) // high)
    return normalized


def weighted_total(plugin_scores: Sequence[tuple[int, Sequence[int]]], nodes: int) -> list[int]:
    """Sum each plugin's normalized scores times its weight, node by node."""
    totals = [0] * nodes
    for weight, scores in plugin_scores:
        for index, score in enumerate(scores):
            totals[index] += weight * score
    return totals


def select_host(totals: Sequence[int], rng: random.Random) -> int:
    """The index of a highest total; among equals each is equally likely (reservoir sampling).

    kube-scheduler's ``selectHost`` does the same with an unseeded generator; the stand-in's is
    seeded, so a run repeats for the same seed.
    """
    if not totals:
        raise ValueError("no node to select")
    chosen, best, ties = 0, totals[0], 1
    for index in range(1, len(totals)):
        score = totals[index]
        if score > best:
            chosen, best, ties = index, score, 1
        elif score == best:
            ties += 1
            if rng.randrange(ties) == 0:
                chosen = index
    return chosen
