"""Which provisioning runs are decisions, for a shared pool's urgent lane (``urgent_run``).

In fleet mode a pool's urgent workers take only the runs that decide for pods no round has
seen: at a saturated 100-cluster wave some 800 rechecks of pods already placed held those
workers while other clusters' windows closed. These tests hold the controller's side: a new
pod's round is a decision (and its retry after a failure); a recheck or a relook is not, and
still comes.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, NODECLAIMS, NODEPOOLS
from karpenter_capi.core.operator import Operator
from karpenter_capi.core.provisioning.relook import RECHECK_SECONDS
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.support import operator_world as world
from tests.support.provider import FakeProvider


class Rounds:
    """Each round the operator's provisioner ran, as whether its look was a decision
    (``urgent_run`` asked just before the look); ``fail`` rounds raise first."""

    def __init__(self, operator: Operator, fail: int = 0) -> None:
        self.decisions: list[bool] = []
        self.fail = fail
        controller = operator.provisioning
        provisioner = controller._provisioner
        look, solve = controller.run_once, provisioner.reconcile
        asked = [False]

        def run_once() -> Any:
            asked[0] = controller.urgent_run()
            return look()

        def reconcile(*args: Any, **kwargs: Any) -> Any:
            self.decisions.append(asked[0])
            if self.fail:
                self.fail -= 1
                raise RuntimeError("the round failed part-way")
            return solve(*args, **kwargs)

        controller.run_once = run_once  # type: ignore[method-assign]
        provisioner.reconcile = reconcile  # type: ignore[method-assign]


def _operator(fail: int = 0) -> tuple[InMemoryAPIServer, SteppedDriver, Rounds]:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = FakeProvider(clock, bind_after_polls=10**6)  # pods stay pending
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    api.create(NODEPOOLS, world.nodepool())
    operator = world.operator(api, clock, provider)
    rounds = Rounds(operator, fail)
    driver = operator.stepped()
    driver.run_until_quiet()
    return api, driver, rounds


def test_a_new_pods_round_is_a_decision_and_its_rechecks_are_not() -> None:
    api, driver, rounds = _operator()
    world.pending_pod(api, "web-0")
    driver.advance(5)
    assert rounds.decisions == [True]
    driver.advance(2 * RECHECK_SECONDS)  # the pod stays pending: rechecked twice
    assert rounds.decisions == [True, False, False]
    world.pending_pod(api, "web-1")
    driver.advance(5)
    assert rounds.decisions == [True, False, False, True]


def test_a_decision_that_failed_part_way_is_retried_as_one() -> None:
    api, driver, rounds = _operator(fail=1)
    world.pending_pod(api, "web-0")
    driver.advance(10)
    assert rounds.decisions == [True, True]
    assert len(api.list(NODECLAIMS).items) == 1
