"""A pass made from the last one's reading decides exactly what a pass from scratch decides.

Why: a disruption pass keeps what it read of each node (``state.ParsedCluster``: the node's
``ExistingNode``; ``ExistingView``: its requirements, host ports, parsed pods, topology counts)
and the next pass reads again only the nodes that changed. Nodes, pods and NodeClaims change
between passes in every way a live cluster changes them (status updates that only bump a
``resourceVersion``, new labels, pods gone, finished or added, a node gone and another come, a
node tainted, a NodeClaim still launching), and after each change the kept reading must be
the one a fresh read gives: the same candidates, simulations and command, and the same view.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from benchmarks import consolidation as bench
from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock, format_timestamp
from karpenter_capi.core.disruption import candidates, simulation
from karpenter_capi.core.disruption.passfacts import PassFacts, pass_facts
from karpenter_capi.core.disruption.planner import PassReport, PassSettings, plan
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.provisioning.state import ClusterSnapshot, ParsedCluster
from karpenter_capi.core.scheduling.existing_view import ExistingView
from karpenter_capi.core.scheduling.podspec import PodSpecs, pod_key
from karpenter_capi.core.scheduling.topology import ExistingPods

Change = Callable[[ClusterSnapshot], ClusterSnapshot]


def _bumped(obj: dict[str, Any], **meta: Any) -> dict[str, Any]:
    """A new version of ``obj`` (a copy: the last snapshot's objects are never changed)."""
    new = copy.deepcopy(obj)
    new["metadata"]["resourceVersion"] = str(int(new["metadata"]["resourceVersion"]) + 1)
    new["metadata"].update(meta)
    return new


def _with(snapshot: ClusterSnapshot, **lists: list[Any]) -> ClusterSnapshot:
    return ClusterSnapshot(
        pods=lists.get("pods", snapshot.pods),
        nodes=lists.get("nodes", snapshot.nodes),
        nodeclaims=lists.get("nodeclaims", snapshot.nodeclaims),
        daemonsets=[],
    )


def _on(snapshot: ClusterSnapshot, node: str) -> list[int]:
    return [i for i, p in enumerate(snapshot.pods) if p["spec"].get("nodeName") == node]


def status_updates(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """A new resourceVersion for every seventh pod, nothing else."""
    pods = [_bumped(p) if i % 7 == 0 else p for i, p in enumerate(snapshot.pods)]
    return _with(snapshot, pods=pods)


def versions_only(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """New versions of some Nodes and NodeClaims with the same content."""
    nodes = [_bumped(n) if i % 5 == 0 else n for i, n in enumerate(snapshot.nodes)]
    claims = [_bumped(c) if i % 6 == 0 else c for i, c in enumerate(snapshot.nodeclaims)]
    return _with(snapshot, nodes=nodes, nodeclaims=claims)


def claim_relabelled(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """A NodeClaim given a new label: its node, not registered (no ``registered`` label, as
    the benchmark's nodes), takes its NodeClaim's labels."""
    claims = list(snapshot.nodeclaims)
    claims[9] = _bumped(claims[9])
    claims[9]["metadata"]["labels"]["team"] = "red"
    return _with(snapshot, nodeclaims=claims)


def relabelled_and_gone(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """A pod with a new label set, pods deleted, a pod finished, and a pod with required
    anti-affinity and a host port added."""
    pods = list(snapshot.pods)
    pods[3] = _bumped(pods[3], labels={"app": "relabelled"})
    finished = _bumped(pods[8])
    finished["status"]["phase"] = "Succeeded"
    pods[8] = finished
    node = pods[20]["spec"]["nodeName"]
    gone = set(_on(snapshot, pods[30]["spec"]["nodeName"])[:2]) | {11, 12}
    added = copy.deepcopy(pods[20])
    added["metadata"].update(name="lonely", uid="uid-lonely", labels={"app": "lonely"})
    added["spec"] = {
        "nodeName": node,
        "containers": [
            {
                "name": "app",
                "ports": [{"containerPort": 80, "hostPort": 8080}],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            }
        ],
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "lonely"}},
                    }
                ]
            }
        },
    }
    pods = [p for i, p in enumerate(pods) if i not in gone] + [added]
    return _with(snapshot, pods=pods)


def anti_affinity_updated(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """A status update of the anti-affinity pod alone (its node changed, its counts did not)."""
    pods = [_bumped(p) if p["metadata"]["name"] == "lonely" else p for p in snapshot.pods]
    return _with(snapshot, pods=pods)


def node_replaced(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """A node deleted with its NodeClaim and pods, another registered (a different size)."""
    gone = snapshot.nodes[4]["metadata"]["name"]
    nodes = [n for n in snapshot.nodes if n["metadata"]["name"] != gone]
    claims = [c for c in snapshot.nodeclaims if c["status"]["nodeName"] != gone]
    pods = [p for p in snapshot.pods if p["spec"].get("nodeName") != gone]
    types = bench.catalog()
    node, claim = bench.node_objects("node-late", types[5], "zone-b", format_timestamp(bench.NOW))
    return _with(snapshot, pods=pods, nodes=[*nodes, node], nodeclaims=[*claims, claim])


def node_tainted(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """A node given a new label and a taint, another cordoned."""
    nodes = list(snapshot.nodes)
    labelled = _bumped(nodes[1])
    labelled["metadata"]["labels"]["team"] = "blue"
    labelled["spec"]["taints"] = [{"key": "dedicated", "value": "blue", "effect": "NoSchedule"}]
    nodes[1] = labelled
    cordoned = _bumped(nodes[2])
    cordoned["spec"]["unschedulable"] = True
    nodes[2] = cordoned
    return _with(snapshot, nodes=nodes)


def claim_launching(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """A NodeClaim launched, its node not registered yet."""
    types = bench.catalog()
    _, claim = bench.node_objects("launching", types[3], "zone-c", format_timestamp(bench.NOW))
    claim["status"] = {"allocatable": types[3].allocatable.to_dict()}
    claim["spec"]["requirements"] = [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [types[3].name]}
    ]
    return _with(snapshot, nodeclaims=[*snapshot.nodeclaims, claim])


def node_emptied(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """Every pod of a node gone (its node leaves the topology index)."""
    node = snapshot.nodes[6]["metadata"]["name"]
    return _with(snapshot, pods=[p for p in snapshot.pods if p["spec"].get("nodeName") != node])


def node_disrupted(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """A node tainted ``karpenter.sh/disrupted`` (a command under way): its pods must move."""
    nodes = list(snapshot.nodes)
    held = _bumped(nodes[10])
    held["spec"]["taints"] = [{"key": wellknown.TAINT_DISRUPTED_KEY, "effect": "NoSchedule"}]
    nodes[10] = held
    return _with(snapshot, nodes=nodes)


def claim_interrupted(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """A NodeClaim the cloud announced it will take: its node's pods must move too."""
    claims = list(snapshot.nodeclaims)
    claims[12] = _bumped(claims[12], annotations={wellknown.ANNOTATION_INTERRUPTION: "spot"})
    return _with(snapshot, nodeclaims=claims)


def pod_pending(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """A pod kube-scheduler could not place (what the simulations place first)."""
    pending = copy.deepcopy(snapshot.pods[0])
    pending["metadata"].update(name="pending", uid="uid-pending", resourceVersion="1")
    del pending["spec"]["nodeName"]
    pending["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    return _with(snapshot, pods=[*snapshot.pods, pending])


def claim_reporting(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The launching NodeClaim reports its capacity (what its NodePool's usage counts)."""
    claims = list(snapshot.nodeclaims)
    index = next(i for i, c in enumerate(claims) if c["metadata"]["name"] == "launching")
    claims[index] = _bumped(claims[index])
    claims[index]["status"]["capacity"] = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    return _with(snapshot, nodeclaims=claims)


def relisted(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """Every object made anew with its version (an informer's relist): none is the very
    object of the last pass, every one is the same version."""
    return _with(
        snapshot,
        pods=copy.deepcopy(snapshot.pods),
        nodes=copy.deepcopy(snapshot.nodes),
        nodeclaims=copy.deepcopy(snapshot.nodeclaims),
    )


def reordered(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The same objects listed in another order, a pod updated among them."""
    pods = [*snapshot.pods[len(snapshot.pods) // 2 :], *snapshot.pods[: len(snapshot.pods) // 2]]
    pods[5] = _bumped(pods[5])
    return _with(snapshot, pods=pods, nodes=list(reversed(snapshot.nodes)))


CHANGES: list[Change] = [
    status_updates,
    versions_only,
    claim_relabelled,
    relabelled_and_gone,
    anti_affinity_updated,
    node_replaced,
    node_tainted,
    claim_launching,
    claim_reporting,
    node_emptied,
    node_disrupted,
    claim_interrupted,
    pod_pending,
    relisted,
    status_updates,
    reordered,
    node_emptied,
    status_updates,
]


def _pass(
    snapshot: ClusterSnapshot, inventories: list[NodePoolInventory], parsed: ParsedCluster
) -> PassReport:
    return plan(
        snapshot,
        inventories,
        [],
        now=bench.NOW,
        clock=FakeClock(bench.NOW),
        settings=PassSettings(evaluate_all=True),
        parsed=parsed,
    )


def _decided(report: PassReport) -> dict[str, Any]:
    summary = report.summary()
    del summary["seconds"]
    summary["candidates"] = [c.name for c in report.candidates]
    summary["excluded"] = dict(report.excluded)
    summary["kept"] = dict(report.kept)
    return summary


def _view_state(view: ExistingView) -> dict[str, Any]:
    """Everything a solve reads of a view, in order."""
    pods: ExistingPods = view.pods
    names = tuple(sorted(view.resource_names(())))
    return {
        "nodes": list(view.nodes),
        "requirements": view.requirements,
        "ports": [list(p) for p in view.ports],
        "resources": view._resources,
        # Label keys in order (a topology's domains by key); values are handed out as sets.
        "domains": (list(view._domains), view._domains),
        "vectors": view.vectors(names),
        "pod_nodes": list(pods.nodes),
        "position": list(pods.position.items()),
        "buckets": [
            (
                ns,
                [
                    (shape, dict(labels), list(per_node.items()))
                    for shape, (labels, per_node) in b.items()
                ],
            )
            for ns, b in pods.buckets.items()
        ],
        "where": list(pods.where.items()),
        "anti_affinity": [(spec.uid, spec.raw, index) for spec, index in pods.anti_affinity],
    }


def _reading(parsed: ParsedCluster) -> dict[str, Any]:
    """What the pass's ``Simulator`` read of the cluster before any simulation."""
    reading = pass_facts(parsed).last("simulator")
    assert reading is not None
    return {
        "options": [(o.name, o.usage) for o in reading.options],  # type: ignore[attr-defined]
        "nodes": [n.name for n in reading.nodes],  # type: ignore[attr-defined]
        "free": reading.free,  # type: ignore[attr-defined]
        "moving": [pod_key(p) for p in reading.moving],  # type: ignore[attr-defined]
        "pending": [pod_key(p) for p in reading.pending],  # type: ignore[attr-defined]
        "not_ready": reading.not_ready,  # type: ignore[attr-defined]
    }


def _differences(
    snapshot: ClusterSnapshot, inventories: list[NodePoolInventory], changes: list[Change]
) -> list[str]:
    """The changes after which a pass made from the last ones read the cluster otherwise
    than a pass from scratch (its simulator's reading)."""
    kept = ParsedCluster()
    _pass(snapshot, inventories, kept)
    found = []
    for change in changes:
        snapshot = change(snapshot)
        _pass(snapshot, inventories, kept)
        fresh = ParsedCluster()
        _pass(snapshot, inventories, fresh)
        if _reading(kept) != _reading(fresh):
            found.append(change.__name__)
    return found


@pytest.mark.parametrize("catalog", ["kwok", "capi"])
def test_passes_over_a_changing_cluster_decide_as_passes_from_scratch(catalog: str) -> None:
    snapshot, inventories, _ = bench.build(40, seed=3, removed=0.3, kind=catalog)
    kept = ParsedCluster()
    _pass(snapshot, inventories, kept)
    _pass(snapshot, inventories, kept)  # the view's vectors are made: the next reuses them
    for change in CHANGES:
        snapshot = change(snapshot)
        incremental = _pass(snapshot, inventories, kept)
        fresh_parsed = ParsedCluster()
        fresh = _pass(snapshot, inventories, fresh_parsed)
        assert _decided(incremental) == _decided(fresh), change.__name__
        assert _reading(kept) == _reading(fresh_parsed), change.__name__
        view, scratch = kept.existing_view, fresh_parsed.existing_view
        assert isinstance(view, ExistingView)
        assert isinstance(scratch, ExistingView)
        rebuilt = ExistingView(view.nodes, PodSpecs())
        assert _view_state(view) == _view_state(rebuilt), change.__name__
        assert _view_state(view) == _view_state(scratch), change.__name__


def test_a_status_update_reads_again_only_the_nodes_it_touched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    snapshot, inventories, _ = bench.build(40, seed=3, removed=0.3)
    kept = ParsedCluster()
    _pass(snapshot, inventories, kept)
    first = kept.existing_view
    assert isinstance(first, ExistingView)
    read: list[str] = []
    real = ExistingView.__init__

    def counting(self: ExistingView, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        previous = kwargs.get("previous", args[2] if len(args) > 2 else None)
        assert previous is first
        read.extend(
            e.node.name
            for e, old in zip(self._entries, previous._entries, strict=True)
            if e is not old
        )

    monkeypatch.setattr(ExistingView, "__init__", counting)
    pods = list(snapshot.pods)
    pods[0] = _bumped(pods[0])
    _pass(_with(snapshot, pods=pods), inventories, kept)
    assert read == [pods[0]["spec"]["nodeName"]]
    view = kept.existing_view
    assert isinstance(view, ExistingView)
    # The topology counts are the last view's: the update changed nothing they count.
    assert view.pods.buckets is first.pods.buckets


def test_the_simulator_reading_without_facts_is_the_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``Simulator`` over a cluster its pass did not read (no facts) reads the raw objects;
    both ways read the same cluster alike."""
    snapshot, inventories, _ = bench.build(40, seed=3, removed=0.3)
    for change in (node_disrupted, claim_interrupted, pod_pending, relabelled_and_gone):
        snapshot = change(snapshot)
    with_facts = ParsedCluster()
    _pass(snapshot, inventories, with_facts)
    monkeypatch.setattr(PassFacts, "has_read", lambda self, snapshot: False)
    without = ParsedCluster()
    _pass(snapshot, inventories, without)
    assert _reading(with_facts) == _reading(without)
    assert _reading(with_facts)["moving"], "the disrupting nodes' pods must move"
    assert _reading(with_facts)["pending"] == ["default/pending"]


def test_a_broken_reuse_of_the_reading_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The NodePools' usage kept whatever the NodeClaims became: the comparison sees it."""
    snapshot, inventories, _ = bench.build(40, seed=3, removed=0.3)
    assert _differences(snapshot, inventories, [claim_launching, claim_reporting]) == []
    monkeypatch.setattr(PassFacts, "claim_versions", lambda self, claims: ("always the same",))
    assert _differences(snapshot, inventories, [claim_launching, claim_reporting])


def test_a_status_update_regroups_only_its_nodes_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pods by node are the last pass's but for the nodes the changed pods are bound to;
    the same objects in another order are grouped afresh (the order within a node counts)."""
    snapshot, inventories, _ = bench.build(40, seed=3, removed=0.3)
    kept = ParsedCluster()
    _pass(snapshot, inventories, kept)
    before = pass_facts(kept).last("pods_by_node")
    assert isinstance(before, dict)
    grouped: list[str] = []
    real = candidates._by_node
    monkeypatch.setattr(candidates, "_by_node", lambda *args: grouped.append("all") or real(*args))
    pods = list(snapshot.pods)
    pods[0] = _bumped(pods[0])
    _pass(_with(snapshot, pods=pods), inventories, kept)
    after = pass_facts(kept).last("pods_by_node")
    assert isinstance(after, dict)
    assert grouped == []
    node = pods[0]["spec"]["nodeName"]
    assert [name for name in after if after[name] is not before.get(name)] == [node]
    _pass(reordered(_with(snapshot, pods=pods)), inventories, kept)
    assert grouped == ["all"]


def test_a_status_update_makes_again_only_its_nodes_existing_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the same Nodes, NodeClaims and nominations, the simulator takes the last pass's
    existing nodes but for those whose bound pods changed; a Node changed reads them all."""
    snapshot, inventories, _ = bench.build(40, seed=3, removed=0.3)
    kept = ParsedCluster()
    _pass(snapshot, inventories, kept)
    read: list[list[str]] = []
    real = simulation.existing_nodes

    def counting(snapshot: ClusterSnapshot, *args: Any, **kwargs: Any) -> Any:
        read.append([n["metadata"]["name"] for n in snapshot.nodes])
        return real(snapshot, *args, **kwargs)

    monkeypatch.setattr(simulation, "existing_nodes", counting)
    pods = list(snapshot.pods)
    pods[0] = _bumped(pods[0])
    snapshot = _with(snapshot, pods=pods)
    _pass(snapshot, inventories, kept)
    assert read == [[pods[0]["spec"]["nodeName"]]]
    read.clear()
    _pass(node_tainted(snapshot), inventories, kept)
    assert [len(names) for names in read] == [len(snapshot.nodes)]
