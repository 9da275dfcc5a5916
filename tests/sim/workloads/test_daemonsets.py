"""DaemonSets: a pod per eligible node, bound there, following nodes as they come and go."""

from __future__ import annotations

from karpenter_capi.core.kube import DAEMONSETS, NODES, PODS, JsonObject
from tests.sim.workloads.harness import NS, Sim, daemonset, new_sim

NO_SCHEDULE = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def placement(pods: list[JsonObject]) -> list[str]:
    return sorted(p["spec"]["nodeName"] for p in pods)


def test_one_pod_per_eligible_node_bound_and_controlled() -> None:
    sim = new_sim(start_delay=1)
    sim.node("n1")
    sim.node("n2")
    sim.node("tainted", taints=[NO_SCHEDULE])
    ds = sim.api.create(DAEMONSETS, daemonset("agent"), NS)
    sim.advance(1)

    pods = sim.pods("agent")
    assert placement(pods) == ["n1", "n2"]
    for pod in pods:
        (ref,) = pod["metadata"]["ownerReferences"]
        assert ref["kind"] == "DaemonSet"
        assert ref["controller"] is True
        assert ref["uid"] == ds["metadata"]["uid"]
        assert pod["metadata"]["name"].startswith("agent-")
        keys = {t.get("key") for t in pod["spec"]["tolerations"]}
        assert {"node.kubernetes.io/not-ready", "node.kubernetes.io/unschedulable"} <= keys
        assert pod["status"]["phase"] == "Running"
    status = sim.api.get(DAEMONSETS, "agent", NS)["status"]
    assert status["desiredNumberScheduled"] == 2
    assert status["currentNumberScheduled"] == 2
    assert status["numberReady"] == 2


def test_a_toleration_admits_the_tainted_node(sim: Sim) -> None:
    sim.node("n1")
    sim.node("tainted", taints=[NO_SCHEDULE])
    tolerations = [{"key": "dedicated", "operator": "Exists"}]
    sim.api.create(DAEMONSETS, daemonset("agent", tolerations=tolerations), NS)
    sim.settle()
    assert placement(sim.pods("agent")) == ["n1", "tainted"]


def test_automatic_tolerations_cover_not_ready_and_unschedulable_nodes(sim: Sim) -> None:
    sim.node(
        "cordoned",
        ready=False,
        taints=[
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        ],
    )
    sim.api.create(DAEMONSETS, daemonset("agent"), NS)
    sim.settle()
    assert placement(sim.pods("agent")) == ["cordoned"]


def test_node_selector_and_affinity_pick_nodes(sim: Sim) -> None:
    sim.node("a", labels={"pool": "a", "zone": "z1"})
    sim.node("b", labels={"pool": "b", "zone": "z1"})
    sim.node("c", labels={"pool": "a", "zone": "z2"})
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}
                ]
            }
        }
    }
    sim.api.create(
        DAEMONSETS, daemonset("agent", nodeSelector={"pool": "a"}, affinity=affinity), NS
    )
    sim.settle()
    assert placement(sim.pods("agent")) == ["a"]


def test_pods_follow_nodes_as_they_come_and_go(sim: Sim) -> None:
    sim.node("n1")
    sim.api.create(DAEMONSETS, daemonset("agent"), NS)
    sim.settle()
    sim.node("n2")
    sim.settle()
    assert placement(sim.pods("agent")) == ["n1", "n2"]

    sim.api.delete(NODES, "n1")
    sim.settle()
    assert placement(sim.pods("agent")) == ["n2"]


def test_a_deleted_daemon_pod_is_recreated_and_a_no_execute_taint_removes_it(sim: Sim) -> None:
    sim.node("n1")
    sim.api.create(DAEMONSETS, daemonset("agent"), NS)
    sim.settle()
    (pod,) = sim.pods("agent")
    sim.api.delete(PODS, pod["metadata"]["name"], NS)
    sim.settle()
    (again,) = sim.pods("agent")
    assert again["metadata"]["name"] != pod["metadata"]["name"]

    # A NoSchedule taint keeps the running pod; a NoExecute one evicts it.
    taint = {"spec": {"taints": [NO_SCHEDULE]}}
    sim.api.patch(NODES, "n1", taint)
    sim.settle()
    assert len(sim.pods("agent")) == 1
    sim.api.patch(NODES, "n1", {"spec": {"taints": [{**NO_SCHEDULE, "effect": "NoExecute"}]}})
    sim.settle()
    assert sim.pods("agent") == []
    status = sim.api.get(DAEMONSETS, "agent", NS)["status"]
    assert status["desiredNumberScheduled"] == 0
    assert status["numberMisscheduled"] == 0


def test_automatic_tolerations_update_the_templates_own_in_place(sim: Sim) -> None:
    # kube's AddOrUpdateTolerationInPodSpec: a toleration the template already has keeps its
    # place (replaced there when only tolerationSeconds differs); the others are appended.
    # The controller's daemon_pod moves them to the end, so the two must stay apart.
    sim.node("n1")
    tolerations = [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
        {"key": "dedicated", "operator": "Exists"},
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 30,
        },
    ]
    sim.api.create(DAEMONSETS, daemonset("agent", tolerations=tolerations), NS)
    sim.settle()
    (pod,) = sim.pods("agent")
    assert pod["spec"]["tolerations"] == [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
        {"key": "dedicated", "operator": "Exists"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    ]
