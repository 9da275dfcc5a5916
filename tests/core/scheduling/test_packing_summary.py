"""The sentence a user reads about a round's re-packing (``packing_summary.py``).

The provisioner logs it and ``explain`` prints it (``tests/core/provisioning/
test_repacked_nodeclaims.py`` runs whole rounds); here each outcome's words.
"""

from __future__ import annotations

from karpenter_capi.core.scheduling import packing, packing_problem
from karpenter_capi.core.scheduling.packing_problem import PackingOutcome
from karpenter_capi.core.scheduling.packing_summary import summarize


def test_a_plan_refused_as_not_robust_says_why_greedy_stayed() -> None:
    types = (
        packing_problem.BinType((8000, 0, 110_000), 1.0, (8000, 0, 1000)),
        packing_problem.BinType((4000, 0, 110_000), 0.55, (4000, 0, 1000)),
        packing_problem.BinType((16000, 0, 110_000), 1.9, (16000, 0, 1000)),
    )
    groups = (
        packing_problem.PodGroup((1000, 0, 1000), 6, frozenset({0, 1, 2})),
        packing_problem.PodGroup((6000, 0, 1000), 1, frozenset({0, 1, 2})),
    )
    # One 16-CPU node, whatever happens; 8 + 4 CPUs strand the 6-CPU pod behind the small
    # ones queued first: $2.55 at worst.
    greedy = (packing_problem.Bin(2, (6, 1)),)
    problem = packing_problem.PackingProblem(types, groups, greedy, queue=(0,) * 6 + (1,))
    outcome = packing.optimize(problem, budget=5.0)
    summary = summarize([outcome])
    assert summary is not None
    assert summary.outcome == "refused"
    assert summary.saved == 0
    assert summary.reason.startswith("kept greedy's plan ($1.9000/h): ")
    # The first integer plan, the dive's and one with fewer nodes of a type (the caps on node
    # types, packing_cuts.py) all strand it.
    assert "3 cheaper plan(s) refused because kube-scheduler could strand pods on them" in (
        summary.reason
    )


def test_greedy_already_optimal_is_said_so() -> None:
    summary = summarize([PackingOutcome("not-cheaper", 0.5, lower_bound=0.5)])
    assert summary is not None
    assert summary.outcome == "not-cheaper"
    assert summary.reason == "kept greedy's plan ($0.5000/h): greedy's plan is already the cheapest"


def test_nothing_cheaper_found_gives_the_floor() -> None:
    summary = summarize([PackingOutcome("not-cheaper", 0.5, lower_bound=0.42)])
    assert summary is not None
    assert summary.reason == (
        "kept greedy's plan ($0.5000/h): no cheaper plan found (none can cost less than $0.4200/h)"
    )


def test_a_plan_voided_by_the_nodepool_limits_is_not_cheaper() -> None:
    summary = summarize([PackingOutcome("voided", 0.5)])
    assert summary is not None
    assert summary.outcome == "not-cheaper"
    assert "the NodePool's limits allow" in summary.reason


def test_several_groups_add_up_and_say_what_kept_the_others_greedy() -> None:
    bins = (packing_problem.Bin(0, (1,)),)
    summary = summarize(
        [
            PackingOutcome("improved", 1.0, bins, 0.8),
            PackingOutcome("budget-exhausted", 0.5, rejected=1),
        ]
    )
    assert summary is not None
    assert summary.outcome == "re-packed"
    assert round(summary.saved, 4) == 0.2
    assert summary.reason == (
        "re-packed 1 group of NodeClaims: saved $0.2000/h against greedy's plan "
        "($1.5000/h -> $1.3000/h); kept greedy's for 1 group of NodeClaims: the re-packing "
        "was stopped by its budget before it found a cheaper plan (1 cheaper plan(s) refused "
        "because kube-scheduler could strand pods on them, which would cost no less than "
        "greedy's plan at worst)"
    )
    assert summary.as_dict()["saved"] == 0.2


def test_a_stage_that_did_not_run_says_nothing() -> None:
    assert summarize([]) is None
    assert summarize([PackingOutcome("disabled", 1.0)]) is None


def test_a_status_it_does_not_know_is_told_as_it_is() -> None:
    summary = summarize([PackingOutcome("out-of-work", 0.5)])
    assert summary is not None
    assert summary.outcome == "out-of-work"
    assert summary.reason == "kept greedy's plan ($0.5000/h): out-of-work"


def test_the_safety_net_is_told_apart_from_the_work_budget() -> None:
    summary = summarize([PackingOutcome("timed-out", 0.5)])
    assert summary is not None
    assert summary.outcome == "timed-out"
    assert "CPU-time safety net" in summary.reason
