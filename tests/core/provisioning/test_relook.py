"""Pods a round left pending get another round only for a change that can alter its decision.

A round's pods stay pending while their NodeClaims launch, join and turn Ready. Each of those
steps used to bring a round that launched nothing (issue 28's fleet benchmark: about 400 rounds
a phase for 55-71 that launched). These tests hold both sides: the steps of a plan coming true
bring no round; a NodeClaim gone or being deleted, or a pod bound where another was placed,
bring one at once; and pods still pending get a round ``RECHECK_SECONDS`` after the last one
whatever changed, as upstream requeues them.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PODS,
)
from karpenter_capi.core.operator import Operator
from karpenter_capi.core.provisioning.relook import RECHECK_SECONDS, RoundView
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.support import operator_world as world
from tests.support.joining import join_node
from tests.support.provider import FakeProvider

PODS_PENDING = ("web-0", "web-1", "web-2")


def _started(
    dry_run: bool = False, **nodepool: Any
) -> tuple[InMemoryAPIServer, SteppedDriver, list[int]]:
    """The operator with three pending pods, five seconds on, and a counter of its rounds;
    ``nodepool`` adds to the NodePool's spec."""
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = FakeProvider(clock, bind_after_polls=10**6)
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    api.create(NODEPOOLS, world.nodepool(**nodepool))
    operator = world.operator(api, clock, provider, dry_run=dry_run)
    rounds = _count_rounds(operator)
    driver = operator.stepped()
    driver.run_until_quiet()
    for name in PODS_PENDING:
        world.pending_pod(api, name)
    driver.advance(5)
    return api, driver, rounds


def _launched() -> tuple[InMemoryAPIServer, SteppedDriver, list[int], str]:
    """The operator after the round that launched one NodeClaim for three pods, a counter of
    its rounds, and the NodeClaim's name. The provider never launches it: the test plays the
    NodeClaim's steps itself."""
    api, driver, rounds = _started()
    claims = api.list(NODECLAIMS).items
    assert len(claims) == 1
    assert rounds[0] == 1
    return api, driver, rounds, str(claims[0]["metadata"]["name"])


def _count_rounds(operator: Operator) -> list[int]:
    provisioner = operator.provisioning._provisioner
    counted = [0]
    original = provisioner.reconcile

    def reconcile(*args: Any, **kwargs: Any) -> Any:
        counted[0] += 1
        return original(*args, **kwargs)

    provisioner.reconcile = reconcile  # type: ignore[method-assign]
    return counted


def _join(api: InMemoryAPIServer, claim: str) -> str:
    reported = (api.get(NODECLAIMS, claim).get("status") or {}).get("allocatable")
    return join_node(api, claim, allocatable=dict(reported) if reported else None)


def _bind(api: InMemoryAPIServer, pod: str, node: str) -> None:
    api.patch(PODS, pod, {"spec": {"nodeName": node}}, "default")


def test_a_plan_coming_true_brings_no_round() -> None:
    api, driver, rounds, claim = _launched()
    node = _join(api, claim)
    driver.advance(3)
    for pod in PODS_PENDING[:2]:
        _bind(api, pod, node)
        driver.advance(1)
    assert rounds[0] == 1, "the NodeClaim's Node joined and pods were bound where placed"
    assert len(api.list(NODECLAIMS).items) == 1


def test_a_harmless_change_is_checked_later_while_pods_wait() -> None:
    api, driver, rounds, claim = _launched()
    _join(api, claim)  # 5 s after the pods came, about 4 s after the round
    driver.advance(RECHECK_SECONDS - 7)
    assert rounds[0] == 1
    driver.advance(5)
    assert rounds[0] == 2, "pods still pending are looked at again, 10 s after the round"
    assert len(api.list(NODECLAIMS).items) == 1, "and still fit where they were placed"


def test_a_pod_bound_elsewhere_brings_a_round_at_once() -> None:
    api, driver, rounds, _ = _launched()
    api.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "other"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    )
    _bind(api, PODS_PENDING[0], "other")
    driver.advance(3)
    assert rounds[0] == 2


def test_a_nodeclaim_gone_brings_a_round_and_a_new_launch() -> None:
    api, driver, rounds, claim = _launched()
    api.delete(NODECLAIMS, claim)
    driver.advance(3)
    assert rounds[0] >= 2
    names = {c["metadata"]["name"] for c in api.list(NODECLAIMS).items}
    assert names, "the pods got a NodeClaim again"
    assert claim not in names


def test_a_nodeclaim_being_deleted_brings_a_round_and_a_new_launch() -> None:
    # Its termination may take long (a Machine slow to go, a finalizer of someone else's):
    # a round counts no room on it, so its pods need a NodeClaim now, not once it is gone.
    api, driver, rounds, claim = _launched()
    api.patch(NODECLAIMS, claim, {"metadata": {"finalizers": ["example.com/hold"]}})
    api.delete(NODECLAIMS, claim)
    driver.advance(3)
    assert rounds[0] == 2
    others = {c["metadata"]["name"] for c in api.list(NODECLAIMS).items} - {claim}
    assert others, "the pods got a NodeClaim while the first one is still being deleted"


def test_pods_left_pending_get_a_round_every_recheck_though_nothing_changed() -> None:
    # A NodePool at its limit leaves the pods pending; raising the limit changes nothing a
    # round's view holds (pods, Nodes, NodeClaims), yet the next round can launch.
    api, driver, rounds = _started(limits={"cpu": "0"})
    assert rounds[0] == 1
    assert not api.list(NODECLAIMS).items, "the NodePool's limit leaves no room"
    api.patch(NODEPOOLS, "general", {"spec": {"limits": {"cpu": "1000"}}})
    driver.advance(RECHECK_SECONDS)
    assert rounds[0] == 2
    assert api.list(NODECLAIMS).items, "the limit raised, the pods got a NodeClaim"


def test_a_dry_run_does_not_look_for_the_nodeclaims_it_never_created() -> None:
    api, driver, rounds = _started(dry_run=True)
    assert rounds[0] == 1
    driver.advance(RECHECK_SECONDS - 7)
    assert rounds[0] == 1, "nothing changed: its planned NodeClaims are not gone"
    assert not api.list(NODECLAIMS).items


def _view(
    pending: set[str], nodes: dict[str, bool], claims: dict[str, str], **kw: Any
) -> RoundView:
    return RoundView(pending=frozenset(pending), nodes=nodes, claims=claims, **kw)


def test_a_round_that_left_a_pod_unplaced_looks_again_at_any_change() -> None:
    last = _view({"a", "b"}, {}, {}).after_round(["c1"], {"a": "c1"})  # b placed nowhere
    assert last.planned is None
    assert last.may_change_decision(_view({"a", "b"}, {"n1": False}, {"c1": ""}), lambda _: None)


def test_a_node_offering_less_than_its_claim_reported_brings_a_round() -> None:
    last = _view({"a"}, {}, {}).after_round(["c1"], {"a": "c1"})
    reported = {"cpu": "4", "memory": "8Gi"}

    def now(node_cpu: str) -> RoundView:
        return _view(
            {"a"},
            {"n1": True},
            {"c1": "n1"},
            allocatable={"c1": reported},
            node_allocatable={"n1": {"cpu": node_cpu, "memory": "8Gi"}},
        )

    assert not last.may_change_decision(now("4"), lambda _: None)
    assert last.may_change_decision(now("3500m"), lambda _: None)


def test_a_node_no_longer_ready_brings_a_round() -> None:
    last = _view({"a"}, {"n1": True}, {"c1": "n1"}).after_round([], {"a": "n1"})
    assert last.may_change_decision(_view({"a"}, {"n1": False}, {"c1": "n1"}), lambda _: None)
    assert not last.may_change_decision(
        _view({"a"}, {"n1": True, "n2": False}, {"c1": "n1"}), lambda _: None
    )
