"""Among plans of equal cost, the re-packer takes the one with the fewest nodes (issue 25).

On a catalog priced by the vCPU, every mix of sizes that holds the pods costs the same, and
the optimizer returned whichever it met first: 6 NodeClaims or 4 for the same pods and price.
A user expects the fewer nodes (fewer DaemonSet pods and objects, less for the controller to
write); with plans nominated (KEP-5278) the plan is realized as made, so merging is safe.
"""

from __future__ import annotations

from karpenter_capi.core.scheduling.packing_problem import (
    Bin,
    BinType,
    PackingProblem,
    PodGroup,
    fewest_nodes,
    plan_cost,
)
from tests.core.scheduling.test_packing import _cheapest, _pods, _pool, _solve, _type

# Priced by the vCPU, like the real-API benchmark's MachineDeployments.
LINEAR = tuple(_type(f"m{cpu}", cpu, 4 * cpu, round(0.029 * cpu, 3)) for cpu in (2, 4, 16, 32))


def _workload() -> list[dict[str, object]]:
    return _pods("small", 120, "250m", "512Mi") + _pods("medium", 10, "1", "2Gi")


def test_with_nominations_equal_cost_plans_take_the_fewest_nodes() -> None:
    result = _solve(_workload(), _pool(types=LINEAR), plans_nominated=True)

    assert round(result.price, 4) == 1.218
    assert _cheapest(result) == ["m2", "m32", "m4", "m4"]  # not m32 and five m2
    assert sum(len(claim.pods) for claim in result.new_nodeclaims) == 130
    assert not result.unschedulable


def _problem(limit: tuple[int, ...] | None = None) -> PackingProblem:
    types = (
        BinType(room=(2,), price=1.0, limit_use=(2,)),
        BinType(room=(4,), price=2.0, limit_use=(5,)),  # counts more than two small ones
        BinType(room=(2,), price=0.0, limit_use=(0,), available=1),  # an existing node
    )
    groups = (PodGroup(vector=(1,), count=6, types=frozenset({0, 1, 2})),)
    greedy = (Bin(0, (2,)), Bin(0, (2,)), Bin(2, (2,)))
    return PackingProblem(types, groups, greedy, (), limit)


def test_nodes_merge_when_one_holds_them_for_no_more() -> None:
    problem = _problem()

    merged = fewest_nodes(problem, problem.greedy)

    assert sorted(merged, key=lambda b: b.type) == [Bin(1, (4,)), Bin(2, (2,))]
    assert plan_cost(problem, merged) == plan_cost(problem, problem.greedy)


def test_a_merge_that_would_pass_the_nodepool_limits_is_not_made() -> None:
    problem = _problem(limit=(4,))

    assert fewest_nodes(problem, problem.greedy) == list(problem.greedy)


def test_a_dearer_node_is_not_bought_to_merge() -> None:
    problem = _problem()
    dearer = PackingProblem(
        (problem.types[0], BinType(room=(4,), price=2.5, limit_use=(4,)), problem.types[2]),
        problem.groups,
        problem.greedy,
        (),
    )

    assert fewest_nodes(dearer, dearer.greedy) == list(dearer.greedy)
