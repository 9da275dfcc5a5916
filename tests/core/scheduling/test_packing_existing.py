"""Re-packing with the free room of existing nodes (issue 25, item 4).

Greedy fills an existing node's room with whatever pod comes first (the largest); the cheapest
plan may put other pods there. With plans nominated (KEP-5278) the re-packing plans the room
of existing nodes for free, and the pods it plans there are nominated to them.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.scheduling.solver_io import ExistingNode, SolveResult
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.core.values.taints import Taint
from tests.core.scheduling.test_packing import C2, C4, C16, _pods, _pool, _solve

Pod = dict[str, Any]


def _node(name: str = "worker-1", *, free_cpu: str = "2", **kw: Any) -> ExistingNode:
    """A registered node of 4 CPUs with ``free_cpu`` of them free."""
    used = 4 - float(free_cpu)
    return ExistingNode(
        name=name,
        labels={wellknown.LABEL_HOSTNAME: name, wellknown.LABEL_ARCH: "amd64"},
        allocatable=ResourceList.parse({"cpu": "4", "memory": "16Gi", "pods": 110}),
        requested=ResourceList.parse({"cpu": f"{used:g}", "memory": "2Gi", "pods": 5}),
        **{"nodepool": "default", **kw},
    )


def _workload() -> list[Pod]:
    # Greedy puts the 1.5-CPU pod in the node's 2 free CPUs and buys 4 CPUs for the rest
    # (a c4 holds 3.9: three pods, plus a c2); two 1-CPU pods there leave 3.5 CPUs: one c4.
    return _pods("big", 1, "1500m") + _pods("small", 4, "1")


def _summary(result: SolveResult) -> tuple[dict[str, list[str]], list[tuple[str, list[str]]]]:
    existing = {
        node: sorted(p["metadata"]["name"] for p in pods) for node, pods in result.existing.items()
    }
    claims = sorted(
        (c.cheapest()[0].name, sorted(p["metadata"]["name"] for p in c.pods))
        for c in result.new_nodeclaims
    )
    return existing, claims


def test_with_nominations_an_existing_nodes_room_holds_the_pods_that_save_most() -> None:
    result = _solve(
        _workload(), _pool(types=(C2, C4, C16)), existing_nodes=[_node()], plans_nominated=True
    )

    existing, claims = _summary(result)
    assert [name[:5] for name in existing["worker-1"]] == ["small", "small"]
    [(name, pods)] = claims
    assert name == "c4"
    assert [pod[:5] for pod in pods] == ["big-0", "small", "small"]
    assert round(result.price, 4) == 0.19
    assert not result.unschedulable


def test_without_nominations_the_existing_node_keeps_what_kube_scheduler_would_put_there() -> None:
    result = _solve(_workload(), _pool(types=(C2, C4, C16)), existing_nodes=[_node()])

    existing, claims = _summary(result)
    assert existing == {"worker-1": ["big-000"]}
    assert sorted(name for name, _ in claims) == ["c2", "c4"]
    assert round(result.price, 4) == 0.29


def test_pods_are_not_planned_on_an_existing_node_whose_taint_they_do_not_tolerate() -> None:
    tainted = _node(taints=(Taint("dedicated", "NoSchedule", "batch"),))
    result = _solve(
        _workload(), _pool(types=(C2, C4, C16)), existing_nodes=[tainted], plans_nominated=True
    )

    existing, claims = _summary(result)
    assert existing == {}
    assert [name for name, _ in claims] == ["c4", "c4"]  # 5.5 CPUs, none on the node
    assert round(result.price, 4) == 0.38
    assert not result.unschedulable


def test_pods_an_in_flight_node_was_launched_for_stay_on_it() -> None:
    launched_for = "default/big-000"
    in_flight = _node("claim-1", in_flight=True, nominated=frozenset({launched_for}))
    result = _solve(
        _workload(), _pool(types=(C2, C4, C16)), existing_nodes=[in_flight], plans_nominated=True
    )

    existing, _ = _summary(result)
    assert "big-000" in existing["claim-1"]
    assert not result.unschedulable


def test_a_node_no_nodeclaim_holds_keeps_what_greedy_put_there() -> None:
    # No nomination reaches it (the nomination controller names NodeClaims' nodes only), so
    # kube-scheduler would fill it in its own order: the plan leaves it as greedy did.
    foreign = _node(nodepool=None)
    result = _solve(
        _workload(), _pool(types=(C2, C4, C16)), existing_nodes=[foreign], plans_nominated=True
    )

    existing, _ = _summary(result)
    assert existing == {"worker-1": ["big-000"]}
    assert round(result.price, 4) == 0.29
