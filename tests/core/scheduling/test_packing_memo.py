"""Re-packing outcomes kept across rounds give the plan a new solve gives, without solving.

Why: until a round's pods bind, every round re-packs the same claims (109 of ``basic-1000``'s
119 re-packing solves repeated one). The memo is exact only if its key holds everything the
outcome depends on and if nothing that depends on the clock is kept; these tests check both.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.instancetype import InstanceType, InstanceTypeOverhead, Offering
from karpenter_capi.core.scheduling import highs
from karpenter_capi.core.scheduling.packing_memo import PackingMemo
from karpenter_capi.core.scheduling.solver import Solver
from karpenter_capi.core.scheduling.solver_io import NodePoolOption, SolveResult
from karpenter_capi.core.values.resources import ResourceList
from tests.support.demo_cluster import demo_provisioner

Pod = dict[str, Any]


def _type(name: str, cpu: int, price: float) -> InstanceType:
    return InstanceType(
        name=name,
        capacity=ResourceList.parse({"cpu": cpu, "memory": f"{4 * cpu}Gi", "pods": 110}),
        offerings=(Offering("zone-a", "on-demand", price),),
        requirements={wellknown.LABEL_ARCH: frozenset({"amd64"})},
        overhead=InstanceTypeOverhead(kube_reserved=ResourceList.parse({"cpu": "100m"})),
    )


# Greedy buys 2 x 16 CPUs for 21 one-CPU pods; the optimum is 16 CPUs plus small nodes.
POOL = NodePoolOption(
    name="default",
    instance_types=(_type("c2", 2, 0.10), _type("c4", 4, 0.19), _type("c16", 16, 0.72)),
)


def _pods(count: int, cpu: str = "1") -> list[Pod]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"web-{i:03d}", "namespace": "default", "labels": {}},
            "spec": {
                "containers": [
                    {"name": "app", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}
                ]
            },
        }
        for i in range(count)
    ]


class _Counting(highs.HiGHS):
    """HiGHS, counting the solves it is asked for."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = 0

    def lp(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return super().lp(*args, **kwargs)

    def milp(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return super().milp(*args, **kwargs)


def _solve(
    pods: list[Pod], memo: PackingMemo | None, backend: highs.HiGHS, budget: float = 5.0
) -> tuple[Solver, SolveResult]:
    solver = Solver(
        [POOL], clock=FakeClock(), packing_backend=backend, packing_budget=budget, packing_memo=memo
    )
    return solver, solver.solve(pods)


def _plan(result: SolveResult) -> list[tuple[str, int]]:
    return sorted((c.cheapest()[0].name, len(c.pods)) for c in result.new_nodeclaims)


def test_the_same_problem_again_gets_the_kept_plan_without_a_solve() -> None:
    memo, backend = PackingMemo(), _Counting()
    first_solver, first = _solve(_pods(21), memo, backend)
    solved = backend.calls
    assert solved > 0
    assert [o.status for o in first_solver.packing_outcomes] == ["improved"]
    again_solver, again = _solve(_pods(21), memo, backend)
    assert backend.calls == solved  # nothing solved the second time
    assert _plan(again) == _plan(first)
    assert again_solver.packing_outcomes == first_solver.packing_outcomes
    assert (memo.solves, memo.hits) == (1, 1)


def test_a_solver_without_a_memo_solves_every_time() -> None:
    backend = _Counting()
    _solve(_pods(21), None, backend)
    solved = backend.calls
    _solve(_pods(21), None, backend)
    assert backend.calls == 2 * solved


def test_a_different_problem_or_setting_is_solved_and_gets_a_fresh_solves_plan() -> None:
    memo = PackingMemo()
    _solve(_pods(21), memo, _Counting())
    # One pod more, bigger pods, or another backend (its settings decide too): each is solved.
    for pods, backend in (
        (_pods(22), _Counting()),
        (_pods(21, "1500m"), _Counting()),
        (_pods(21), _Counting()),
    ):
        _, result = _solve(pods, memo, backend)
        assert backend.calls > 0
        _, fresh = _solve(pods, None, _Counting())
        assert _plan(result) == _plan(fresh)
    assert memo.hits == 0


def test_the_same_pods_under_other_settings_are_solved_again() -> None:
    memo, backend = PackingMemo(), _Counting()
    _solve(_pods(21), memo, backend)
    calls = backend.calls
    _solve(_pods(21), memo, backend, budget=4.0)  # another safety net
    assert backend.calls > calls
    calls = backend.calls
    nominated = Solver(
        [POOL], clock=FakeClock(), packing_backend=backend, plans_nominated=True, packing_memo=memo
    )
    nominated.solve(_pods(21))  # no readiness model: another problem to the optimizer
    assert backend.calls > calls
    assert memo.hits == 0


class _SlowCPU:
    """A CPU clock that moves a second at each reading: every solve spends a second."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_a_timed_out_outcome_is_not_kept() -> None:
    # The safety net struck because of the machine, not the problem: the next round tries again.
    memo, backend = PackingMemo(), _Counting(cpu_clock=_SlowCPU())
    solver, _ = _solve(_pods(21), memo, backend, budget=0.5)
    assert [o.status for o in solver.packing_outcomes] == ["timed-out"]
    calls = backend.calls
    solver, _ = _solve(_pods(21), memo, backend, budget=0.5)
    assert [o.status for o in solver.packing_outcomes] == ["timed-out"]
    assert backend.calls > calls
    assert len(memo) == 0


def test_the_least_recently_used_outcome_goes_first_past_the_size() -> None:
    memo, backend = PackingMemo(size=1), _Counting()
    _solve(_pods(21), memo, backend)
    _solve(_pods(22), memo, backend)
    calls = backend.calls
    _solve(_pods(21), memo, backend)  # dropped for the 22-pod problem: solved again
    assert backend.calls > calls
    assert len(memo) == 1


def test_changing_a_handed_out_outcome_changes_nothing_kept() -> None:
    memo = PackingMemo()
    solver, _ = _solve(_pods(21), memo, _Counting())
    solver.packing_outcomes[0].status = "scribbled"
    again, _ = _solve(_pods(21), memo, _Counting())
    assert [o.status for o in again.packing_outcomes] == ["improved"]


def test_a_provisioner_solves_a_round_it_already_solved_once() -> None:
    # A dry run launches nothing, so each round plans the same pods on the same claims.
    memo = PackingMemo()
    _, provisioner = demo_provisioner(dry_run=True, packing_memo=memo)
    first = provisioner.reconcile()
    assert first.packing is not None
    solves = memo.solves
    assert solves > 0
    again = provisioner.reconcile()
    assert memo.solves == solves
    assert memo.hits == solves
    assert again.packing == first.packing
    assert [d.pods for d in again.launched] == [d.pods for d in first.launched]
