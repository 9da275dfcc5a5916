"""Deployments: pods from the template (through a ReplicaSet), scaling, replacement, deletion
order, status. The ReplicaSet in between: ``test_replicasets``."""

from __future__ import annotations

from karpenter_capi.core.kube import DEPLOYMENTS, POD_DISRUPTION_BUDGETS, PODS
from tests.sim.workloads.harness import NS, Sim, condition, new_sim


def test_deployment_creates_owned_pods_from_its_template(sim: Sim) -> None:
    sim.deployment("web", 3)
    sim.settle()

    (replicaset,) = sim.replicasets("web")
    digest = replicaset["metadata"]["labels"]["pod-template-hash"]
    pods = sim.pods("web")
    assert len(pods) == 3
    for pod in pods:
        meta = pod["metadata"]
        assert meta["name"].startswith(f"web-{digest}-")
        assert meta["labels"] == {"app": "web", "pod-template-hash": digest}
        (ref,) = meta["ownerReferences"]
        assert (ref["apiVersion"], ref["kind"]) == ("apps/v1", "ReplicaSet")
        assert ref["uid"] == replicaset["metadata"]["uid"]
        assert ref["controller"] is True
        assert pod["status"]["phase"] == "Pending"
    status = sim.api.get(DEPLOYMENTS, "web", NS)["status"]
    assert status["replicas"] == 3
    assert status["readyReplicas"] == 0


def test_scale_up_and_down_prefers_deleting_unscheduled_pods() -> None:
    sim = new_sim(start_delay=1)
    sim.node("n1")
    sim.deployment("web", 2)
    sim.settle()
    first, _second = sorted(p["metadata"]["name"] for p in sim.pods("web"))
    sim.bind({"metadata": {"name": first}}, "n1")
    sim.advance(2)

    sim.scale("web", 4)
    sim.settle()
    assert len(sim.pods("web")) == 4

    sim.scale("web", 1)
    sim.settle()
    (kept,) = sim.pods("web")
    assert kept["metadata"]["name"] == first  # the running, scheduled pod stays
    assert kept["status"]["phase"] == "Running"
    status = sim.api.get(DEPLOYMENTS, "web", NS)["status"]
    assert status["replicas"] == 1
    assert status["readyReplicas"] == 1
    assert status["availableReplicas"] == 1


def test_scale_down_among_equals_deletes_the_newest(sim: Sim) -> None:
    sim.deployment("web", 1)
    sim.settle()
    (oldest,) = sim.pods("web")
    sim.clock.advance(10)
    sim.scale("web", 3)
    sim.settle()
    sim.scale("web", 1)
    sim.settle()
    assert [p["metadata"]["name"] for p in sim.pods("web")] == [oldest["metadata"]["name"]]


def test_deleted_and_evicted_pods_are_replaced(sim: Sim) -> None:
    sim.deployment("web", 2)
    sim.settle()
    victim, other = sim.pods("web")

    sim.api.delete(PODS, victim["metadata"]["name"], NS)
    sim.settle()
    names = {p["metadata"]["name"] for p in sim.pods("web")}
    assert len(names) == 2
    assert victim["metadata"]["name"] not in names

    sim.api.evict(other["metadata"]["name"], NS)
    sim.settle()
    names = {p["metadata"]["name"] for p in sim.pods("web")}
    assert len(names) == 2
    assert other["metadata"]["name"] not in names


def test_a_terminating_pod_is_replaced_before_it_is_gone() -> None:
    sim = new_sim(termination_cap=5)
    sim.node("n1")
    sim.deployment("web", 1)
    sim.settle()
    (pod,) = sim.pods("web")
    name = pod["metadata"]["name"]
    sim.api.patch(PODS, name, {"metadata": {"finalizers": ["example.com/hold"]}}, NS)
    sim.bind(pod, "n1")
    sim.advance(5)

    sim.api.delete(PODS, name, NS)
    sim.settle()
    live = sim.live("web")
    assert len(live) == 1
    assert live[0]["metadata"]["name"] != name
    assert sim.api.get(DEPLOYMENTS, "web", NS)["status"]["replicas"] == 1


def test_pdb_status_follows_ready_deployment_pods() -> None:
    sim = new_sim(start_delay=2)
    sim.node("n1")
    sim.deployment("web", 2)
    sim.api.create(
        POD_DISRUPTION_BUDGETS,
        {
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
        NS,
    )
    sim.settle()
    for pod in sim.pods("web"):
        sim.bind(pod, "n1")
    sim.settle()
    assert sim.api.get(POD_DISRUPTION_BUDGETS, "web", NS)["status"]["disruptionsAllowed"] == 0

    sim.advance(2)
    assert all(condition(p, "Ready") == "True" for p in sim.pods("web"))
    status = sim.api.get(POD_DISRUPTION_BUDGETS, "web", NS)["status"]
    assert (status["currentHealthy"], status["desiredHealthy"]) == (2, 1)
    assert status["disruptionsAllowed"] == 1
