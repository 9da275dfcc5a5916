"""Deployment -> ReplicaSet -> pods: the chain kube's Deployment and ReplicaSet controllers make.

The provisioner's batch window reads the ReplicaSet controlling a pending pod (its replicas
against its pods), so a Deployment's pods must come from a ReplicaSet it controls, named
``<deployment>-<pod-template-hash>``, as in a real cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube import DEPLOYMENTS, PODS, REPLICASETS
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver.shared_reads import SharedReads
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.workloads import add_workload_emulation
from karpenter_capi.sim.workloads.deployments import template_hash
from tests.sim.workloads.harness import NS, Sim, deployment, new_sim, pod_spec


def _controller(obj: dict[str, Any]) -> dict[str, Any]:
    (ref,) = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")]
    return dict(ref)


def test_a_deployments_pods_are_controlled_by_its_replicaset(sim: Sim) -> None:
    web = sim.deployment("web", 3)
    sim.settle()

    (replicaset,) = sim.replicasets("web")
    digest = template_hash(web["spec"]["template"])
    meta = replicaset["metadata"]
    assert meta["name"] == f"web-{digest}"
    assert _controller(replicaset) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "web",
        "uid": web["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    hashed = {"app": "web", "pod-template-hash": digest}
    assert meta["labels"] == hashed
    assert replicaset["spec"]["selector"] == {"matchLabels": hashed}
    assert replicaset["spec"]["template"]["metadata"]["labels"] == hashed
    assert replicaset["spec"]["replicas"] == 3
    assert meta["annotations"] == {
        "deployment.kubernetes.io/revision": "1",
        "deployment.kubernetes.io/desired-replicas": "3",
        "deployment.kubernetes.io/max-replicas": "4",  # maxSurge 25% of 3, rounded up
    }
    pods = sim.api.list(PODS, NS).items
    assert len(pods) == 3
    for pod in pods:
        assert _controller(pod) == {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": f"web-{digest}",
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert pod["metadata"]["labels"] == hashed


def test_scaling_the_deployment_scales_its_replicaset(sim: Sim) -> None:
    sim.deployment("web", 2)
    sim.settle()
    (first,) = sim.replicasets("web")

    sim.scale("web", 5)
    sim.settle()
    (replicaset,) = sim.replicasets("web")
    assert replicaset["metadata"]["uid"] == first["metadata"]["uid"]
    assert replicaset["spec"]["replicas"] == 5
    assert replicaset["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] == "5"
    assert replicaset["metadata"]["annotations"]["deployment.kubernetes.io/max-replicas"] == "7"
    assert len(sim.live("web")) == 5
    assert {_controller(p)["uid"] for p in sim.live("web")} == {first["metadata"]["uid"]}

    sim.scale("web", 1)
    sim.settle()
    (replicaset,) = sim.replicasets("web")
    assert replicaset["spec"]["replicas"] == 1
    assert len(sim.live("web")) == 1
    assert sim.api.get(DEPLOYMENTS, "web", NS)["status"]["replicas"] == 1


def test_replicaset_status_counts_its_pods_and_the_deployment_sums_them() -> None:
    sim = new_sim(start_delay=1)
    sim.node("n1")
    sim.deployment("web", 3)
    sim.settle()
    first = sorted(sim.pods("web"), key=lambda p: p["metadata"]["name"])[0]
    sim.bind(first, "n1")
    sim.advance(2)

    (replicaset,) = sim.replicasets("web")
    assert replicaset["status"] == {
        "replicas": 3,
        "fullyLabeledReplicas": 3,
        "readyReplicas": 1,
        "availableReplicas": 1,
        "observedGeneration": replicaset["metadata"]["generation"],
    }
    status = sim.api.get(DEPLOYMENTS, "web", NS)["status"]
    assert status["replicas"] == 3
    assert status["updatedReplicas"] == 3
    assert status["readyReplicas"] == 1
    assert status["availableReplicas"] == 1
    assert status["unavailableReplicas"] == 2

    # A pod that lost a template label is still the ReplicaSet's, but not fully labeled.
    sim.api.patch(PODS, first["metadata"]["name"], {"metadata": {"labels": {"app": None}}}, NS)
    sim.scale("web", 4)
    sim.settle()
    (replicaset,) = sim.replicasets("web")
    assert replicaset["status"]["replicas"] == 4
    assert replicaset["status"]["fullyLabeledReplicas"] == 3
    assert replicaset["status"]["observedGeneration"] == replicaset["metadata"]["generation"] == 2


def test_a_changed_template_gets_a_new_replicaset_and_the_old_one_is_scaled_to_zero(
    sim: Sim,
) -> None:
    sim.deployment("web", 2)
    sim.settle()
    (old,) = sim.replicasets("web")

    sim.api.patch(DEPLOYMENTS, "web", {"spec": {"template": {"spec": pod_spec(priority=5)}}}, NS)
    sim.settle()
    by_name = {rs["metadata"]["name"]: rs for rs in sim.replicasets("web")}
    assert set(by_name) == {old["metadata"]["name"], f"web-{template_hash(_template(sim))}"}
    new = by_name[f"web-{template_hash(_template(sim))}"]
    assert by_name[old["metadata"]["name"]]["spec"]["replicas"] == 0
    assert new["spec"]["replicas"] == 2
    assert new["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    live = sim.live("web")
    assert len(live) == 2
    assert {_controller(p)["name"] for p in live} == {new["metadata"]["name"]}


def _template(sim: Sim) -> dict[str, Any]:
    return dict(sim.api.get(DEPLOYMENTS, "web", NS)["spec"]["template"])


def test_a_name_taken_by_another_template_bumps_the_collision_count(sim: Sim) -> None:
    web = deployment("web", 1)
    digest = template_hash(web["spec"]["template"])
    squatter = deployment(f"web-{digest}", 0)  # a ReplicaSet of another template, same name
    sim.api.create(REPLICASETS, {"metadata": squatter["metadata"], "spec": squatter["spec"]}, NS)
    sim.deployment("web", 1)
    sim.settle()

    assert sim.api.get(DEPLOYMENTS, "web", NS)["status"]["collisionCount"] == 1
    (replicaset,) = sim.replicasets("web")
    assert replicaset["metadata"]["name"] == f"web-{template_hash(web['spec']['template'], 1)}"
    assert len(sim.live("web")) == 1


def test_deleting_the_deployment_takes_its_replicaset_and_pods(sim: Sim) -> None:
    sim.deployment("web", 2)
    sim.settle()
    sim.api.delete(DEPLOYMENTS, "web", NS)
    sim.settle()
    assert sim.api.list(REPLICASETS, NS).items == []
    assert sim.live("web") == []


def test_a_replicaset_of_its_own_keeps_its_pods(sim: Sim) -> None:
    spec = deployment("cache", 2)
    sim.api.create(REPLICASETS, {"metadata": spec["metadata"], "spec": spec["spec"]}, NS)
    sim.settle()
    pods = sim.pods("cache")
    assert len(pods) == 2
    victim = pods[0]["metadata"]["name"]
    sim.api.delete(PODS, victim, NS)
    sim.settle()
    assert len(sim.live("cache")) == 2
    assert victim not in {p["metadata"]["name"] for p in sim.live("cache")}


@pytest.mark.parametrize("shared", [False, True], ids=["copies", "shared-reads"])
def test_a_pod_released_by_its_replicaset_is_replaced_and_a_relabelled_one_is_not(
    shared: bool,
) -> None:
    """The ReplicaSet learns it lost a pod from the old side of the pod's update (its new side
    names no owner); over ``SharedReads`` the two sides share what a write left unchanged."""
    clock = FakeClock()
    api = new_cluster(clock=clock)
    client = SharedReads(api) if shared else api
    manager = Manager(client, client, clock=clock)
    add_workload_emulation(manager)
    sim = Sim(clock, api, SteppedDriver(manager))
    sim.deployment("web", 2)
    sim.settle()
    first, second = sorted(p["metadata"]["name"] for p in sim.pods("web"))
    api.patch(PODS, first, {"metadata": {"labels": {"extra": "yes"}}}, NS)
    sim.settle()
    assert sorted(p["metadata"]["name"] for p in sim.pods("web")) == [first, second]
    api.patch(PODS, first, {"metadata": {"ownerReferences": []}}, NS)
    sim.settle()
    owned = sorted(p["metadata"]["name"] for p in sim.pods("web"))
    assert len(owned) == 2
    assert first not in owned
    assert second in owned


@pytest.mark.parametrize("shared", [False, True], ids=["copies", "shared-reads"])
def test_each_sync_counts_the_pods_as_the_cache_now_holds_them(shared: bool) -> None:
    """A sync keeps what it read of each stored pod object for the next; a pod's new version
    (no longer Ready; relabelled) is read again, over ``SharedReads`` too."""
    clock = FakeClock()
    api = new_cluster(clock=clock)
    client = SharedReads(api) if shared else api
    manager = Manager(client, client, clock=clock)
    add_workload_emulation(manager, start_delay=1)
    sim = Sim(clock, api, SteppedDriver(manager))
    sim.node("n1")
    sim.deployment("web", 3)
    sim.settle()
    pods = sorted(sim.pods("web"), key=lambda p: p["metadata"]["name"])
    for pod in pods:
        sim.bind(pod, "n1")
    sim.advance(2)
    (replicaset,) = sim.replicasets("web")
    assert replicaset["status"]["readyReplicas"] == 3

    name = pods[0]["metadata"]["name"]
    stored = api.get(PODS, name, NS)
    conditions = [
        {**c, "status": "False"} if c["type"] == "Ready" else c
        for c in stored["status"]["conditions"]
    ]
    api.patch(PODS, name, {"status": {"conditions": conditions}}, NS, subresource="status")
    sim.settle()
    (replicaset,) = sim.replicasets("web")
    assert replicaset["status"]["readyReplicas"] == 2
    assert replicaset["status"]["fullyLabeledReplicas"] == 3

    # A label change alone syncs nothing (``_owner_of``); the next sync (a scale) counts it.
    api.patch(PODS, pods[1]["metadata"]["name"], {"metadata": {"labels": {"app": None}}}, NS)
    sim.scale("web", 4)
    sim.settle()
    (replicaset,) = sim.replicasets("web")
    assert replicaset["status"]["replicas"] == 4
    assert replicaset["status"]["fullyLabeledReplicas"] == 3
