"""The stand-in honours ``status.nominatedNodeName`` as kube-scheduler does (KEP-1923, KEP-5278).

A pod with a nominated node tries that node first (``evaluateNominatedNode``); pods nominated
to a node with a priority at least the incoming pod's keep their room there
(``addGENominatedPods``); a failed attempt clears the nomination and a binding clears it too.
"""

from __future__ import annotations

import pytest

from karpenter_capi.core.kube import PODS
from tests.sim.scheduler.harness import NAMESPACE, Sim, new_sim


@pytest.fixture
def sim() -> Sim:
    return new_sim()


def _nominate(sim: Sim, pod: str, node: str) -> None:
    sim.api.patch(
        PODS, pod, {"status": {"nominatedNodeName": node}}, NAMESPACE, subresource="status"
    )


def _nominated(sim: Sim, pod: str) -> str | None:
    value: str | None = (sim.get(pod).get("status") or {}).get("nominatedNodeName")
    return value


def _queue_two_small_before_a_big(sim: Sim) -> None:
    # Queued in name order: the two 2-CPU pods come before the 3-CPU one.
    sim.pod("a-small", cpu="2")
    sim.pod("b-small", cpu="2")
    sim.pod("c-big", cpu="3")
    sim.settle()  # no node yet: all three wait


def test_without_nominations_least_allocated_strands_the_big_pod(sim: Sim) -> None:
    _queue_two_small_before_a_big(sim)
    sim.node("n1")
    sim.node("n2")
    sim.settle()
    assert {sim.node_of("a-small"), sim.node_of("b-small")} == {"n1", "n2"}
    assert sim.node_of("c-big") is None


def test_nominations_realize_the_plan_all_three_bind(sim: Sim) -> None:
    _queue_two_small_before_a_big(sim)
    _nominate(sim, "a-small", "n1")
    _nominate(sim, "b-small", "n1")
    _nominate(sim, "c-big", "n2")
    sim.node("n1")
    sim.node("n2")
    sim.settle()
    assert [sim.node_of(p) for p in ("a-small", "b-small", "c-big")] == ["n1", "n1", "n2"]
    assert (sim.scheduler.bound_as_nominated, sim.scheduler.bound_elsewhere) == (3, 0)
    # The API server clears the nomination with the binding.
    assert [_nominated(sim, p) for p in ("a-small", "b-small", "c-big")] == [None, None, None]


def test_a_pod_without_nomination_does_not_take_a_nominated_pod_s_room(sim: Sim) -> None:
    sim.pod("a-first", cpu="3")  # queued first, nominated nowhere
    sim.pod("b-planned", cpu="3")
    sim.settle()
    _nominate(sim, "b-planned", "only")
    sim.node("only")
    sim.settle()
    assert sim.node_of("b-planned") == "only"
    assert sim.node_of("a-first") is None


def test_lower_priority_nominations_reserve_nothing(sim: Sim) -> None:
    sim.pod("a-urgent", cpu="3", priority=100)
    sim.pod("b-planned", cpu="3")
    sim.settle()
    _nominate(sim, "b-planned", "only")
    sim.node("only")
    sim.settle()
    assert sim.node_of("a-urgent") == "only"
    assert sim.node_of("b-planned") is None


def test_a_failed_attempt_clears_the_nomination(sim: Sim) -> None:
    sim.pod("web", cpu="2")
    sim.settle()
    _nominate(sim, "web", "not-ready")
    sim.node("not-ready", ready=False)
    sim.settle()
    assert sim.node_of("web") is None
    assert _nominated(sim, "web") is None


def test_a_nomination_alone_does_not_start_a_cycle(sim: Sim) -> None:
    # kube-scheduler's queue keeps an unschedulable pod where it is when only its
    # nomination changes: the nomination is tried at the next event that requeues the pod.
    sim.pod("web", cpu="2")
    sim.settle()
    cycles = sim.scheduler.cycles
    _nominate(sim, "web", "booting")
    sim.settle()
    assert sim.scheduler.cycles == cycles
    assert _nominated(sim, "web") == "booting"


def test_a_deleted_pod_frees_its_room_for_the_next_cycle(sim: Sim) -> None:
    sim.node("only", cpu="2")
    sim.pod("a-first", cpu="2")
    sim.pod("b-second", cpu="2")
    sim.settle()
    assert sim.node_of("a-first") == "only"
    sim.api.delete(PODS, "a-first", NAMESPACE, grace_period_seconds=0)
    sim.settle()
    assert sim.node_of("b-second") == "only"
