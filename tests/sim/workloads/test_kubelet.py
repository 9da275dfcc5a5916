"""The kubelet stand-in: bound pods start after the delay, deletions finish, orphans go."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.kube import NODES, PODS
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.workloads import ANNOTATION_START_DELAY
from tests.sim.workloads.harness import NS, condition, new_sim, pod_spec


def make_pod(api: InMemoryAPIServer, name: str, node: str | None = None, **meta: Any) -> None:
    spec = pod_spec(**({"nodeName": node} if node else {}))
    api.create(PODS, {"metadata": {"name": name, **meta}, "spec": spec}, NS)


def test_a_pod_bound_to_a_ready_node_runs_after_the_start_delay() -> None:
    sim = new_sim(start_delay=3)
    sim.node("n1")
    make_pod(sim.api, "p", "n1")
    sim.advance(2.9)
    assert sim.api.get(PODS, "p", NS)["status"]["phase"] == "Pending"

    sim.advance(0.1)
    pod = sim.api.get(PODS, "p", NS)
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["startTime"]
    for kind in ("Ready", "ContainersReady", "PodScheduled", "Initialized"):
        assert condition(pod, kind) == "True"
    (container,) = pod["status"]["containerStatuses"]
    assert container["ready"] is True
    assert "running" in container["state"]


def test_the_start_delay_counts_from_binding_and_waits_for_node_readiness() -> None:
    sim = new_sim(start_delay=3)
    sim.node("n1", ready=False)
    make_pod(sim.api, "p")
    sim.advance(10)
    sim.bind({"metadata": {"name": "p"}}, "n1")
    sim.advance(10)
    assert sim.api.get(PODS, "p", NS)["status"]["phase"] == "Pending"

    sim.api.patch(
        NODES,
        "n1",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        subresource="status",
    )
    sim.advance(2)
    assert sim.api.get(PODS, "p", NS)["status"]["phase"] == "Pending"
    sim.advance(1)
    assert sim.api.get(PODS, "p", NS)["status"]["phase"] == "Running"


def test_the_start_delay_annotation_wins() -> None:
    sim = new_sim(start_delay=30)
    sim.node("n1")
    make_pod(sim.api, "p", "n1", annotations={ANNOTATION_START_DELAY: "1s"})
    sim.advance(1)
    assert sim.api.get(PODS, "p", NS)["status"]["phase"] == "Running"


def test_an_unbound_pod_stays_pending() -> None:
    sim = new_sim(start_delay=0)
    sim.node("n1")
    make_pod(sim.api, "p")
    sim.advance(60)
    assert sim.api.get(PODS, "p", NS)["status"]["phase"] == "Pending"


@pytest.mark.parametrize(("grace", "finished_after"), [(30, 2.0), (1, 1.0), (0, 0.0)])
def test_a_graceful_deletion_is_finished_after_min_grace_and_cap(
    grace: int, finished_after: float
) -> None:
    sim = new_sim(start_delay=0, termination_cap=2)
    sim.node("n1")
    make_pod(sim.api, "p", "n1", finalizers=["example.com/hold"])
    sim.settle()
    assert sim.api.get(PODS, "p", NS)["status"]["phase"] == "Running"

    sim.api.delete(PODS, "p", NS, grace_period_seconds=grace)
    if finished_after:
        sim.advance(finished_after - 0.5)
        assert sim.api.get(PODS, "p", NS)["status"]["phase"] == "Running"
    sim.advance(0.5)
    pod = sim.api.get(PODS, "p", NS)
    assert pod["status"]["phase"] == "Succeeded"
    assert condition(pod, "Ready") == "False"

    # The finalizer's owner releases it; nothing else holds it.
    sim.api.patch(PODS, "p", {"metadata": {"finalizers": None}}, NS)
    sim.settle()
    with pytest.raises(NotFound):
        sim.api.get(PODS, "p", NS)


def test_pods_of_a_deleted_node_are_deleted() -> None:
    sim = new_sim(start_delay=0)
    sim.node("n1")
    sim.node("n2")
    make_pod(sim.api, "a", "n1")
    make_pod(sim.api, "b", "n2")
    sim.settle()

    sim.api.delete(NODES, "n1")
    sim.settle()
    assert [p["metadata"]["name"] for p in sim.pods()] == ["b"]


def test_pods_of_a_node_held_by_a_finalizer_stay_until_the_node_is_gone() -> None:
    # kube's pod GC collects pods of Nodes that no longer exist; a Node being deleted still
    # exists (Karpenter's termination finalizer holds it while it drains), so its pods stay
    # and only eviction moves them, under their PodDisruptionBudgets.
    sim = new_sim(start_delay=0)
    sim.node("n1")
    sim.api.patch(NODES, "n1", {"metadata": {"finalizers": ["karpenter.sh/termination"]}})
    make_pod(sim.api, "a", "n1")
    sim.settle()

    sim.api.delete(NODES, "n1")
    sim.settle()
    assert [(p["metadata"]["name"], p["status"]["phase"]) for p in sim.pods()] == [("a", "Running")]

    sim.api.patch(NODES, "n1", {"metadata": {"finalizers": None}})
    sim.settle()
    assert sim.pods() == []


def test_deployment_pods_of_a_deleted_node_come_back_pending() -> None:
    sim = new_sim(start_delay=0)
    sim.node("n1")
    sim.deployment("web", 2)
    sim.settle()
    for pod in sim.pods("web"):
        sim.bind(pod, "n1")
    sim.settle()
    assert {p["status"]["phase"] for p in sim.pods("web")} == {"Running"}

    sim.api.delete(NODES, "n1")
    sim.settle()
    pods = sim.pods("web")
    assert len(pods) == 2
    assert all(p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName") for p in pods)
