"""DaemonSet overhead: reserved on a node only when the DaemonSet's pod would run there."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.scheduling.daemons import DaemonOverhead, daemon_pod
from karpenter_capi.core.scheduling.hostports import HostPort
from karpenter_capi.core.values.requirements import Requirements
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.core.values.taints import Taint

ARCH = "kubernetes.io/arch"
ZONE = "topology.kubernetes.io/zone"

AMD64_NODE = Requirements.from_dicts([{"key": ARCH, "operator": "In", "values": ["amd64"]}])


def daemonset(name: str, cpu: str = "100m", memory: str = "64Mi", **spec: Any) -> dict[str, Any]:
    container = {"name": name, "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [container], **spec},
            }
        },
    }


def rl(**values: str) -> ResourceList:
    return ResourceList.parse(values)


def test_every_daemonset_that_would_run_is_counted_with_its_pod_slot() -> None:
    overhead = DaemonOverhead([daemonset("logs"), daemonset("metrics", cpu="200m")])
    assert overhead.for_node(AMD64_NODE, ()) == rl(cpu="300m", memory="128Mi", pods="2")


def test_no_daemonsets_no_overhead() -> None:
    assert DaemonOverhead([]).for_node(AMD64_NODE, ()).is_zero()


def test_a_daemonset_that_does_not_tolerate_the_node_taint_is_not_counted() -> None:
    overhead = DaemonOverhead([daemonset("logs"), daemonset("metrics", cpu="200m")])
    gpu_taint = Taint("nvidia.com/gpu", "NoSchedule")
    assert overhead.for_node(AMD64_NODE, (gpu_taint,)).is_zero()

    tolerant = daemonset(
        "gpu-driver",
        cpu="500m",
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    overhead = DaemonOverhead([daemonset("logs"), tolerant])
    assert overhead.for_node(AMD64_NODE, (gpu_taint,)) == rl(cpu="500m", memory="64Mi", pods="1")


def test_a_no_execute_taint_keeps_daemons_off_too() -> None:
    overhead = DaemonOverhead([daemonset("logs")])
    assert overhead.for_node(AMD64_NODE, (Taint("dedicated", "NoExecute", "db"),)).is_zero()


def test_a_prefer_no_schedule_taint_does_not_keep_daemons_off() -> None:
    overhead = DaemonOverhead([daemonset("logs")])
    counted = overhead.for_node(AMD64_NODE, (Taint("spot", "PreferNoSchedule"),))
    assert counted == rl(cpu="100m", memory="64Mi", pods="1")


@pytest.mark.parametrize(
    "taint",
    [
        Taint("node.kubernetes.io/not-ready", "NoExecute"),
        Taint("node.kubernetes.io/unreachable", "NoExecute"),
        Taint("node.kubernetes.io/disk-pressure", "NoSchedule"),
        Taint("node.kubernetes.io/memory-pressure", "NoSchedule"),
        Taint("node.kubernetes.io/pid-pressure", "NoSchedule"),
        Taint("node.kubernetes.io/unschedulable", "NoSchedule"),
    ],
)
def test_daemons_tolerate_the_node_condition_taints_their_controller_tolerates(
    taint: Taint,
) -> None:
    overhead = DaemonOverhead([daemonset("logs")])
    assert not overhead.for_node(AMD64_NODE, (taint,)).is_zero()


def test_only_host_network_daemons_tolerate_an_unavailable_network() -> None:
    network_down = (Taint("node.kubernetes.io/network-unavailable", "NoSchedule"),)
    overhead = DaemonOverhead([daemonset("cni", hostNetwork=True), daemonset("logs")])
    pods = overhead.pods_for_node(AMD64_NODE, network_down)
    assert [p.labels["app"] for p in pods] == ["cni"]


def test_a_daemonset_for_arm64_is_not_counted_on_an_amd64_node() -> None:
    arm_only = daemonset("arm-agent", nodeSelector={ARCH: "arm64"})
    overhead = DaemonOverhead([arm_only, daemonset("logs")])
    assert overhead.for_node(AMD64_NODE, ()) == rl(cpu="100m", memory="64Mi", pods="1")
    arm_node = Requirements.from_labels({ARCH: "arm64"})
    assert overhead.for_node(arm_node, ()) == rl(cpu="200m", memory="128Mi", pods="2")


def test_a_beta_arch_node_selector_means_the_same_label() -> None:
    arm_only = daemonset("arm-agent", nodeSelector={"beta.kubernetes.io/arch": "arm64"})
    assert DaemonOverhead([arm_only]).for_node(AMD64_NODE, ()).is_zero()


def test_a_well_known_label_the_node_leaves_open_is_counted() -> None:
    # The NodePool says nothing about zone; whatever zone the node lands in, the daemon may
    # match it, so the capacity is reserved.
    zonal = daemonset("zonal-agent", nodeSelector={ZONE: "zone-a"})
    assert not DaemonOverhead([zonal]).for_node(AMD64_NODE, ()).is_zero()


def test_a_custom_label_the_node_does_not_promise_is_not_counted() -> None:
    special = daemonset("special", nodeSelector={"example.com/team": "ml"})
    overhead = DaemonOverhead([special])
    assert overhead.for_node(AMD64_NODE, ()).is_zero()
    ml_node = AMD64_NODE.merged(Requirements.from_labels({"example.com/team": "ml"}))
    assert not overhead.for_node(ml_node, ()).is_zero()


def test_any_required_node_affinity_term_may_place_the_daemon() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ARCH, "operator": "In", "values": ["arm64"]}]},
                    {"matchExpressions": [{"key": ARCH, "operator": "In", "values": ["amd64"]}]},
                ]
            }
        }
    }
    overhead = DaemonOverhead([daemonset("multi-arch", affinity=affinity)])
    assert not overhead.for_node(AMD64_NODE, ()).is_zero()
    s390x = Requirements.from_labels({ARCH: "s390x"})
    assert overhead.for_node(s390x, ()).is_zero()


def test_preferred_node_affinity_does_not_keep_a_daemon_off() -> None:
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {
                        "matchExpressions": [{"key": ARCH, "operator": "In", "values": ["arm64"]}]
                    },
                }
            ]
        }
    }
    overhead = DaemonOverhead([daemonset("agent", affinity=affinity)])
    assert not overhead.for_node(AMD64_NODE, ()).is_zero()


def test_daemon_host_ports_are_those_of_the_daemons_that_run() -> None:
    exporter = daemonset(
        "node-exporter",
        containers=[{"name": "exporter", "ports": [{"containerPort": 9100, "hostPort": 9100}]}],
    )
    arm_exporter = daemonset(
        "arm-exporter",
        nodeSelector={ARCH: "arm64"},
        containers=[{"name": "exporter", "ports": [{"containerPort": 9200, "hostPort": 9200}]}],
    )
    usage = DaemonOverhead([exporter, arm_exporter]).host_ports_for_node(AMD64_NODE, ())
    assert list(usage) == [HostPort("", "TCP", 9100)]


def test_answers_are_stable_across_calls_and_taint_order() -> None:
    overhead = DaemonOverhead([daemonset("logs")])
    a, b = Taint("a", "PreferNoSchedule"), Taint("b", "PreferNoSchedule")
    first = overhead.pods_for_node(AMD64_NODE, (a, b))
    assert overhead.pods_for_node(AMD64_NODE, (b, a)) is first
    assert overhead.for_node(AMD64_NODE, [a, b]) == overhead.for_node(AMD64_NODE, (b, a))


def test_the_daemon_pod_carries_the_controller_tolerations_without_duplicates() -> None:
    ds = daemonset(
        "logs",
        tolerations=[
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            {"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"},
        ],
    )
    pod = daemon_pod(ds)
    keys = [t.get("key") for t in pod["spec"]["tolerations"]]
    assert keys.count("node.kubernetes.io/not-ready") == 1
    assert "dedicated" in keys
    assert "node.kubernetes.io/network-unavailable" not in keys
    assert pod["metadata"]["namespace"] == "kube-system"
    # The DaemonSet object itself is left as it was.
    assert len(ds["spec"]["template"]["spec"]["tolerations"]) == 2


def test_an_unreadable_daemonset_is_left_out_and_named_with_its_problem() -> None:
    overhead = DaemonOverhead([daemonset("broken", cpu="lots"), daemonset("logs")])
    assert overhead.for_node(AMD64_NODE, ()) == rl(cpu="100m", memory="64Mi", pods="1")
    assert len(overhead) == 1
    [unreadable] = overhead.unreadable
    assert unreadable.name == "kube-system/broken"
    assert unreadable.problem == (
        "cannot read its spec: resource 'cpu': 'lots': not a valid Kubernetes quantity"
    )
