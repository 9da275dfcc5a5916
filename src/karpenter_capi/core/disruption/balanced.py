"""``consolidationPolicy: Balanced``: is a consolidation move worth the pods it disrupts?

``WhenEmptyOrUnderutilized`` takes any move that saves anything, however little, however many
pods it evicts; ``WhenEmpty`` takes none that evicts a pod. ``Balanced`` (upstream Karpenter's
``designs/balanced-consolidation.md``) scores each move by comparing what it saves and what it
disrupts, both as shares of its NodePool::

    savings fraction    = savings / the NodePool's total price
    disruption fraction = move cost of the removed nodes / the NodePool's total move cost
    score               = savings fraction / disruption fraction

and takes it when ``score >= 1/k``, with ``k = 2``. A node's move cost (``candidates.move_cost``)
is 1 for the node plus each pod's eviction cost (1 by default, more with a positive
``controller.kubernetes.io/pod-deletion-cost`` or priority, at most 10; a negative one counts
0). Both fractions are shares, so the score does not change with the NodePool's size; in a
uniform NodePool a replacement passes exactly when it costs at most half the node it replaces,
and deleting an empty node always passes.

The totals cover every NodeClaim of the NodePool, candidate or not (a node protected by
``do-not-disrupt`` still counts in what the pool costs and holds), taken once per pass. A move
over several NodePools is scored per ``Balanced`` NodePool, its net savings split in proportion
to each one's share of the removed nodes' price; every ``Balanced`` NodePool in it must approve,
and NodePools with other policies are not scored (their own policy already admitted the move).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodepool import ConsolidationPolicy
from karpenter_capi.core.disruption.candidates import (
    PER_NODE_DISRUPTION_COST,
    Candidate,
    bound_pods,
    offering_price,
)
from karpenter_capi.core.disruption.facts import NodeFacts
from karpenter_capi.core.disruption.passfacts import PassFacts
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.provisioning.state import ClusterSnapshot

BALANCED_K: Final = 2
"""Upstream's fixed k: the smallest for which a replacement within one instance family (half
the price) passes in a uniform NodePool."""
_ROUNDING: Final = 1e-9
"""A score equal to the threshold passes: the design's edge cases (a replacement at exactly
half the price) must not turn on how a float rounds."""


@dataclass(frozen=True)
class PoolTotals:
    """What a NodePool costs per hour and what moving all its nodes would cost."""

    price: float
    move_cost: float


@dataclass(frozen=True)
class Score:
    """One ``Balanced`` NodePool's view of a move."""

    nodepool: str
    savings: float
    """The share of the move's net savings per hour attributed to this NodePool."""
    move_cost: float
    totals: PoolTotals
    k: int = BALANCED_K

    @property
    def savings_fraction(self) -> float:
        return self.savings / self.totals.price if self.totals.price > 0 else 0.0

    @property
    def disruption_fraction(self) -> float:
        return self.move_cost / self.totals.move_cost if self.totals.move_cost > 0 else 0.0

    @property
    def value(self) -> float:
        """0 for a move that saves nothing (or a NodePool that costs nothing), infinite for one
        that disrupts nothing; else savings fraction over disruption fraction."""
        if self.savings_fraction <= 0:
            return 0.0
        if self.disruption_fraction <= 0:
            return math.inf
        return self.savings_fraction / self.disruption_fraction

    @property
    def threshold(self) -> float:
        return 1.0 / self.k

    @property
    def approved(self) -> bool:
        return self.value >= self.threshold - _ROUNDING

    def summary(self) -> str:
        """Upstream's event wording: ``score 0.42 < threshold 0.50 (k: 2, savings 4.2%, ...)``."""
        sign = ">=" if self.approved else "<"
        return (
            f"score {self.value:.2f} {sign} threshold {self.threshold:.2f} (k: {self.k}, "
            f"savings {self.savings_fraction * 100:.1f}%, "
            f"disruption {self.disruption_fraction * 100:.1f}%)"
        )

    def rejection(self, what: str) -> str:
        """Why a ``Balanced`` NodePool keeps a node: ``what`` is the move, e.g. "replacing it"."""
        return (
            f"{what} saves ${self.savings:.4f}/h, which does not outweigh disruption cost "
            f"{self.move_cost:.1f} in NodePool {self.nodepool} (consolidationPolicy Balanced): "
            f"{self.summary()}"
        )


def is_balanced(candidate: Candidate) -> bool:
    return candidate.pool.spec.disruption.consolidation_policy == ConsolidationPolicy.BALANCED


def pool_totals(
    snapshot: ClusterSnapshot,
    inventories: Sequence[NodePoolInventory],
    move_costs: Mapping[str, float] | None = None,
    *,
    facts: PassFacts | None = None,
) -> dict[str, PoolTotals]:
    """Every NodePool's totals over all its NodeClaims, launched or launching, candidates or not.

    A NodeClaim is priced by the offering its instance type, zone and capacity type name (on its
    Node, else on itself), 0 when the inventory has none; a NodeClaim without a Node yet costs
    the node's own move cost only. ``move_costs``: nodes' move costs already known (the
    candidates'), not summed again. ``facts``: what earlier passes read of each object version.
    """
    facts = facts if facts is not None else PassFacts()
    known = move_costs or {}
    types = {inv.nodepool: {it.name: it for it in inv.instance_types} for inv in inventories}
    # Each node's move cost (``candidates.move_cost`` of its reschedulable pods), as the
    # candidate checks summed it; a node without pods costs its own only.
    node_costs = bound_pods(snapshot.pods, facts)
    nodes: dict[str, NodeFacts] = {}
    for _, node_facts in facts.nodes(snapshot.nodes):
        nodes[node_facts.name] = node_facts
    price: dict[str, float] = {}
    cost: dict[str, float] = {}
    for _, claim in facts.claims(snapshot.nodeclaims):
        pool = str(claim.labels.get(wellknown.LABEL_NODEPOOL, ""))
        if pool not in types:
            continue
        node_name = claim.node_name
        node = nodes.get(node_name) if node_name else None
        labels = {**claim.labels, **(node.labels if node is not None else {})}
        instance_type = types[pool].get(str(labels.get(wellknown.LABEL_INSTANCE_TYPE, "")))
        found = offering_price(
            instance_type,
            str(labels.get(wellknown.LABEL_TOPOLOGY_ZONE, "")),
            str(labels.get(wellknown.LABEL_CAPACITY_TYPE, "")),
        )
        # A NaN price (a broken price source) must not poison every score of the NodePool.
        price[pool] = price.get(pool, 0.0) + (found if found and not math.isnan(found) else 0.0)
        moving = known.get(node_name)
        if moving is None:
            pods = node_costs.get(node_name)
            moving = pods.move_cost if pods is not None else PER_NODE_DISRUPTION_COST
        cost[pool] = cost.get(pool, 0.0) + moving
    return {pool: PoolTotals(price[pool], cost[pool]) for pool in price}


def score_move(
    candidates: Sequence[Candidate], savings: float, totals: Mapping[str, PoolTotals]
) -> dict[str, Score]:
    """Each ``Balanced`` NodePool's score of removing ``candidates`` for ``savings`` per hour
    (net of any replacement). A NodePool missing from ``totals`` scores 0: nothing to weigh
    the move against, so it is refused."""
    by_pool: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        if is_balanced(candidate):
            by_pool.setdefault(candidate.nodepool, []).append(candidate)
    source_price = sum(c.price for c in candidates)
    pools = {c.nodepool for c in candidates}
    scores = {}
    for pool, members in by_pool.items():
        share = savings
        if len(pools) > 1 and source_price > 0:
            share = savings * sum(c.price for c in members) / source_price
        scores[pool] = Score(
            pool, share, sum(c.move_cost for c in members), totals.get(pool, PoolTotals(0, 0))
        )
    return scores


def delete_bound(candidate: Candidate, totals: Mapping[str, PoolTotals]) -> Score | None:
    """The best score any move of this ``Balanced`` candidate alone can reach: deleting it
    outright (a replacement only saves less). None for another policy."""
    if not is_balanced(candidate):
        return None
    return score_move([candidate], candidate.price, totals)[candidate.nodepool]


def rejected(scores: Iterable[Score]) -> Score | None:
    """The first ``Balanced`` NodePool that refuses the move, or None when all approve."""
    return next((s for s in sorted(scores, key=lambda s: s.nodepool) if not s.approved), None)
