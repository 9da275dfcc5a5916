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
    api.bind({"metadata": {"name": pod}, "target": {"kind": "Node", "name": node}}, "default")


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


def test_a_pod_bound_on_a_node_outside_the_plan_is_checked_by_the_recheck() -> None:
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
    assert rounds[0] == 1, "it took no room the plan counted on: the others still fit"
    driver.advance(RECHECK_SECONDS)
    assert rounds[0] == 2, "and pods still pending are looked at again"
    assert len(api.list(NODECLAIMS).items) == 1


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


def _bound(where: dict[str, str]) -> Any:
    """A pod cache lookup: pod key -> the pod, bound to ``where[key]``."""
    return lambda key: {"metadata": {}, "spec": {"nodeName": where[key]}} if key in where else None


def _two_nodes_planned(classes: dict[str, str] | None) -> RoundView:
    """A round that placed pod a on NodeClaim c1 (Node n1) and pod b on c2 (Node n2)."""
    nodes, claims = {"n1": True, "n2": True}, {"c1": "n1", "c2": "n2"}
    return _view({"a", "b"}, nodes, claims).after_round([], {"a": "c1", "b": "c2"}, classes)


def test_replicas_swapped_by_kube_scheduler_bring_no_round() -> None:
    last = _two_nodes_planned({"a": "web", "b": "web"})
    nodes, claims = {"n1": True, "n2": True}, {"c1": "n1", "c2": "n2"}
    swapped = _bound({"a": "n2", "b": "n1"})
    assert not last.may_change_decision(_view(set(), nodes, claims), swapped)
    one_early = _bound({"a": "n2"})  # b, still pending, has a's room on n1
    assert not last.may_change_decision(_view({"b"}, nodes, claims), one_early)


def test_more_replicas_on_a_node_than_planned_bring_a_round() -> None:
    last = _two_nodes_planned({"a": "web", "b": "web"})
    nodes, claims = {"n1": True, "n2": True}, {"c1": "n1", "c2": "n2"}
    assert last.may_change_decision(_view(set(), nodes, claims), _bound({"a": "n2", "b": "n2"}))


def test_a_pod_in_room_planned_for_another_class_brings_a_round() -> None:
    nodes, claims = {"n1": True, "n2": True}, {"c1": "n1", "c2": "n2"}
    for classes in ({"a": "web", "b": "db"}, None):
        last = _two_nodes_planned(classes)
        assert last.may_change_decision(_view({"b"}, nodes, claims), _bound({"a": "n2"}))


def test_replicas_bound_to_each_others_nodeclaims_bring_no_round() -> None:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = FakeProvider(clock, bind_after_polls=10**6)
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    api.create(NODEPOOLS, world.nodepool())
    operator = world.operator(api, clock, provider)
    rounds = _count_rounds(operator)
    driver = operator.stepped()
    driver.run_until_quiet()
    for name in ("big-0", "big-1"):
        world.pending_pod(api, name, cpu="1500m")  # one a node: two NodeClaims
    driver.advance(5)
    planned = operator.provisioning._provisioner.planned()
    assert planned is not None
    assert rounds[0] == 1
    assert len(set(planned.values())) == 2, planned
    nodes = {claim: _join(api, claim) for claim in set(planned.values())}
    driver.advance(3)
    # kube-scheduler binds one replica to the Node launched for the other, still pending.
    _bind(api, "big-0", nodes[planned["default/big-1"]])
    driver.advance(3)
    assert rounds[0] == 1, "a swap of equal replicas leaves the plan as it was"
    _bind(api, "big-1", nodes[planned["default/big-0"]])
    driver.advance(3)
    assert rounds[0] == 1
    assert len(api.list(NODECLAIMS).items) == 2


def _two_claims_launching(classes: dict[str, str]) -> RoundView:
    """A round that placed pods a and b on NodeClaim c1 and c, d on c2, neither named yet."""
    return _view({"a", "b", "c", "d"}, {}, {"c1": "", "c2": ""}, allocatable=_REPORTED).after_round(
        [], {"a": "c1", "b": "c1", "c": "c2", "d": "c2"}, classes
    )


_REPORTED = {"c1": {"cpu": "2"}, "c2": {"cpu": "2"}}


def _n1_joined(pending: set[str], c1: str = "", c2: str = "") -> RoundView:
    """Node n1 joined, named by NodeClaim c1 or c2 (``"n1"``) or by neither yet."""
    claims = {"c1": c1, "c2": c2}
    return _view(
        pending, {"n1": True}, claims, allocatable=_REPORTED, node_allocatable={"n1": {"cpu": "2"}}
    )


def test_replicas_on_a_node_no_nodeclaim_names_yet_bring_no_round() -> None:
    # kube-scheduler fills the first Node to join with replicas the round placed on another
    # NodeClaim, before the cache holds the NodeClaim naming that Node.
    last = _two_claims_launching({"a": "web", "b": "web", "c": "web", "d": "web"})
    on_n1 = _bound({"c": "n1", "d": "n1"})
    assert not last.may_change_decision(_n1_joined({"a", "b"}), on_n1)
    # The same if the round saw n1 already, not named yet (and so not usable, tainted
    # unregistered): it counted n1's room as its NodeClaim's.
    seen = _view(
        {"a", "b", "c", "d"}, {"n1": False}, {"c1": "", "c2": ""}, allocatable=_REPORTED
    ).after_round([], {"a": "c1", "b": "c1", "c": "c2", "d": "c2"}, dict.fromkeys("abcd", "web"))
    assert not seen.may_change_decision(_n1_joined({"a", "b"}), on_n1)
    # And once a NodeClaim names it, whichever it is: a and b have c and d's room on c2.
    assert not last.may_change_decision(_n1_joined({"a", "b"}, c1="n1"), on_n1)
    assert not last.may_change_decision(_n1_joined({"a", "b"}, c2="n1"), on_n1)


def test_pods_on_an_unnamed_node_in_room_planned_for_another_class_bring_a_round() -> None:
    last = _two_claims_launching({"a": "db", "b": "db", "c": "web", "d": "web"})
    on_n1 = _bound({"c": "n1", "d": "n1"})
    assert not last.may_change_decision(_n1_joined({"a", "b"}), on_n1), "n1 may be c2's"
    assert last.may_change_decision(_n1_joined({"a", "b"}, c1="n1"), on_n1), "a and b's room"
    assert not last.may_change_decision(_n1_joined({"a", "b"}, c2="n1"), on_n1)


def test_more_pods_on_an_unnamed_node_than_any_nodeclaim_holds_bring_a_round() -> None:
    last = _two_claims_launching({"a": "web", "b": "web", "c": "web", "d": "web"})
    three = _bound({"a": "n1", "c": "n1", "d": "n1"})
    assert last.may_change_decision(_n1_joined({"b"}), three), "c1 or c2, one too many"
