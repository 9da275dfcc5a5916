"""The ``Balanced`` score on the worked examples of upstream's design and tests.

The example NodePool (``designs/balanced-consolidation.md``): ten nodes, eight at $4.84/day and
two at $9.68/day ($58.08/day), 80 pods of default cost, so a move cost total of 90 (1 per node
plus 1 per pod). Prices may be per day or per hour: only their shares of the pool matter.
"""

from __future__ import annotations

import math

import pytest

from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.disruption.balanced import (
    BALANCED_K,
    PoolTotals,
    Score,
    delete_bound,
    rejected,
    score_move,
)
from karpenter_capi.core.disruption.candidates import Candidate, move_cost, rescheduling_cost

from .builders import Cluster

RFC_POOL = PoolTotals(price=58.08, move_cost=90)


def _score(savings: float, cost: float, totals: PoolTotals = RFC_POOL, k: int = 2) -> Score:
    return Score("default", savings, cost, totals, k)


def test_an_oversized_node_replaced_by_a_quarter_of_its_price_is_approved() -> None:
    # m7i.2xlarge -> m7i.large saves 7.26 and moves 3 pods (cost 1 + 3).
    score = _score(7.26, 4)
    assert score.savings_fraction == pytest.approx(0.125)
    assert score.disruption_fraction == pytest.approx(4 / 90)
    assert score.value == pytest.approx(2.8125)
    assert score.approved
    assert score.summary() == (
        "score 2.81 >= threshold 0.50 (k: 2, savings 12.5%, disruption 4.4%)"
    )


def test_a_delete_into_spare_room_is_approved() -> None:
    score = _score(4.84, 5)  # a whole m7i.xlarge, 4 pods
    assert score.value == pytest.approx(1.5)
    assert score.approved


def test_a_marginal_replace_is_rejected_at_k2_but_would_pass_at_k3() -> None:
    # m7i.xlarge -> m7i.large saves 2.42 and moves 8 pods: 4.2% of the cost for 10% of the pods.
    assert _score(2.42, 9).value == pytest.approx(0.41667, abs=1e-4)
    assert not _score(2.42, 9).approved
    assert _score(2.42, 9, k=3).approved
    assert not _score(2.42, 9, k=1).approved
    assert "score 0.42 < threshold 0.50" in _score(2.42, 9).summary()


def test_a_move_that_saves_nothing_or_loses_money_scores_zero() -> None:
    for savings in (0.0, -1.0):
        score = _score(savings, 11)
        assert score.value == 0
        assert not score.approved


def test_a_uniform_pool_replace_at_exactly_half_the_price_is_the_edge_and_passes() -> None:
    # Ten m7i.xlarge: replacing one by an m7i.large (half the price) scores exactly 0.5.
    uniform = PoolTotals(price=48.40, move_cost=90)
    assert _score(2.42, 9, uniform).value == pytest.approx(0.5)
    assert _score(2.42, 9, uniform).approved
    # A cent less saved and it no longer does.
    assert not _score(2.41, 9, uniform).approved


def test_expensive_to_restart_pods_make_the_same_saving_not_worth_it() -> None:
    # Node B runs 3 model servers at cost 10 each and a proxy: 31 pods' worth, 32 with the node.
    totals = PoolTotals(price=58.08, move_cost=117)
    light, heavy = _score(4.84, 5, totals), _score(4.84, 32, totals)
    assert light.approved
    assert light.value == pytest.approx(1.95)
    assert not heavy.approved
    assert heavy.value == pytest.approx(0.3047, abs=1e-3)


def test_the_score_does_not_change_with_the_pool_size() -> None:
    ten = _score(7.26, 4)
    hundred = _score(7.26, 4, PoolTotals(price=580.80, move_cost=900))
    assert hundred.value == pytest.approx(ten.value)


def test_degenerate_totals() -> None:
    assert math.isinf(_score(4.84, 0).value)
    assert _score(4.84, 0).approved
    assert not _score(0, 0).approved
    assert not _score(4.84, 5, PoolTotals(price=0, move_cost=90)).approved


def test_pod_costs_follow_upstreams_eviction_cost_and_clamp() -> None:
    def pod(annotations: dict[str, str] | None = None, priority: int | None = None) -> dict:
        spec: dict = {} if priority is None else {"priority": priority}
        return {"metadata": {"annotations": annotations or {}}, "spec": spec}

    deletion = "controller.kubernetes.io/pod-deletion-cost"
    assert rescheduling_cost(pod()) == 1.0
    assert rescheduling_cost(pod({deletion: "2147483647"})) == 10.0  # 17 clamped to 10
    assert rescheduling_cost(pod({deletion: "-2147483647"})) == -10.0
    assert rescheduling_cost(pod(priority=2**25)) == 2.0
    # A move counts 1 for the node and no pod below 0.
    assert move_cost([]) == 1.0
    assert move_cost([pod(), pod({deletion: "-2147483647"})]) == 2.0
    assert move_cost([pod({deletion: "2147483647"})] * 3 + [pod()]) == 32.0


def _candidate(name: str, pool: str, policy: str, price: float, cost: float) -> Candidate:
    cluster = Cluster()
    cluster.disruption = {**cluster.disruption, "consolidationPolicy": policy}
    return Candidate(
        nodeclaim={"metadata": {"name": name}},
        node={"metadata": {"name": name}},
        nodepool=pool,
        pool=NodePool.model_validate(cluster.pool(pool)),
        instance_type=None,
        zone="zone-a",
        capacity_type="on-demand",
        price=price,
        pods=[],
        disruption_cost=cost - 1,
        move_cost=cost,
    )


def test_a_move_over_two_pools_scores_only_the_balanced_one_with_its_share_of_savings() -> None:
    totals = {"a": PoolTotals(10.0, 10.0), "b": PoolTotals(10.0, 10.0)}
    balanced = _candidate("a-0", "a", "Balanced", 4.0, 2.0)
    other = _candidate("b-0", "b", "WhenEmptyOrUnderutilized", 1.0, 8.0)

    scores = score_move([balanced, other], 3.0, totals)

    assert list(scores) == ["a"]  # b's own policy already admitted the move
    # a held 4 of the 5 dollars removed: 80% of the 3 saved.
    assert scores["a"].savings == pytest.approx(2.4)
    assert scores["a"].value == pytest.approx((2.4 / 10) / (2 / 10))
    assert rejected(scores.values()) is None


def test_every_balanced_pool_in_a_move_must_approve() -> None:
    totals = {"a": PoolTotals(10.0, 10.0), "b": PoolTotals(10.0, 10.0)}
    cheap_to_move = _candidate("a-0", "a", "Balanced", 2.0, 1.0)
    costly_to_move = _candidate("b-0", "b", "Balanced", 2.0, 9.0)

    scores = score_move([cheap_to_move, costly_to_move], 2.0, totals)

    assert scores["a"].approved
    refusal = rejected(scores.values())
    assert refusal is scores["b"]
    assert refusal.value == pytest.approx((1.0 / 10) / (9 / 10))


def test_a_pool_without_totals_refuses_and_other_policies_have_no_bound() -> None:
    candidate = _candidate("a-0", "a", "Balanced", 2.0, 1.0)
    assert not score_move([candidate], 2.0, {})["a"].approved
    assert delete_bound(_candidate("b-0", "b", "WhenEmptyOrUnderutilized", 2.0, 1.0), {}) is None


def test_a_single_node_pool_delete_scores_one() -> None:
    candidate = _candidate("only", "a", "Balanced", 4.84, 2.0)
    bound = delete_bound(candidate, {"a": PoolTotals(4.84, 2.0)})
    assert bound is not None
    assert bound.value == pytest.approx(1.0)
    assert bound.approved
    assert bound.k == BALANCED_K
