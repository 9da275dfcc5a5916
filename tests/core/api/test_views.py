"""Read-only views: raw Pod/Node JSON and both Cluster API versions validate into the same
meaning; unknown fields are ignored; views cannot be mutated."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from karpenter_capi.core.api.capi_views import (
    MachineDeploymentView,
    MachinePoolView,
    MachineSetView,
    MachineView,
    scalable_view,
)
from karpenter_capi.core.api.views import NodeView, PodView

from .examples import machine_deployment, machine_v1beta1, machine_v1beta2

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-1",
        "namespace": "shop",
        "uid": "p-1",
        "labels": {"app": "web"},
        "annotations": {"karpenter.sh/do-not-disrupt": "true"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "web",
                "uid": "r",
                "controller": True,
            }
        ],
        "managedFields": [{"manager": "kubectl"}],
    },
    "spec": {
        "schedulerName": "default-scheduler",
        "priorityClassName": "high",
        "priority": 1000,
        "preemptionPolicy": "PreemptLowerPriority",
        "nodeSelector": {"kubernetes.io/arch": "arm64"},
        "overhead": {"cpu": "10m"},
        "tolerations": [{"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "topology.kubernetes.io/zone",
                                    "operator": "In",
                                    "values": ["a", "b"],
                                }
                            ]
                        }
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "preference": {
                            "matchExpressions": [
                                {
                                    "key": "karpenter.sh/capacity-type",
                                    "operator": "In",
                                    "values": ["spot"],
                                }
                            ]
                        },
                    }
                ],
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "web"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            },
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {
                    "matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]
                },
            }
        ],
        "initContainers": [
            {"name": "init", "resources": {"requests": {"cpu": "2"}}},
            {
                "name": "proxy",
                "restartPolicy": "Always",
                "resources": {"requests": {"memory": "64Mi"}},
            },
        ],
        "containers": [
            {
                "name": "web",
                "image": "nginx",
                "resources": {
                    "requests": {"cpu": "500m", "memory": 1073741824},
                    "limits": {"cpu": "1"},
                },
                "ports": [
                    {"containerPort": 80, "hostPort": 8080, "protocol": "TCP"},
                    {"containerPort": 9090},
                ],
            }
        ],
    },
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes",
            }
        ],
    },
}


def test_pod_view_reads_what_scheduling_needs() -> None:
    pod = PodView.model_validate(POD)
    assert pod.key == "shop/web-1"
    assert pod.metadata.controller_ref() is not None
    assert pod.spec.node_selector == {"kubernetes.io/arch": "arm64"}
    affinity = pod.spec.affinity
    assert affinity is not None
    assert affinity.node_affinity is not None
    assert affinity.node_affinity.required[0].match_expressions[0].values == ("a", "b")
    assert affinity.node_affinity.preferred[0].weight == 10
    assert affinity.pod_anti_affinity is not None
    assert affinity.pod_anti_affinity.required[0].topology_key == "kubernetes.io/hostname"
    spread = pod.spec.topology_spread_constraints[0]
    assert spread.label_selector is not None
    assert spread.label_selector.matches({"app": "web"})
    assert pod.spec.containers[0].resources.requests == {"cpu": "500m", "memory": "1073741824"}
    assert pod.spec.init_containers[1].restart_policy == "Always"
    assert [p.host_port for p in pod.host_ports] == [8080]
    assert pod.spec.tolerations[0].operator == "Exists"
    assert pod.spec.priority == 1000
    assert pod.spec.preemption_policy == "PreemptLowerPriority"
    scheduled = pod.condition("PodScheduled")
    assert scheduled is not None
    assert scheduled.reason == "Unschedulable"
    assert not pod.is_terminal


def test_views_are_frozen() -> None:
    pod = PodView.model_validate(POD)
    with pytest.raises(ValidationError, match="frozen"):
        pod.metadata.name = "other"  # type: ignore[misc]


def test_node_view() -> None:
    node = NodeView.model_validate(
        {
            "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {
                "providerID": "aws:///us-west-2a/i-1",
                "unschedulable": True,
                "taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}],
            },
            "status": {
                "capacity": {"cpu": "4", "pods": 110},
                "allocatable": {"cpu": "3920m"},
                "conditions": [
                    {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}
                ],
                "nodeInfo": {"kubeletVersion": "v1.31.0"},
            },
        }
    )
    assert node.spec.provider_id == "aws:///us-west-2a/i-1"
    assert node.spec.unschedulable
    assert node.is_ready
    assert node.status.capacity == {"cpu": "4", "pods": "110"}
    assert node.spec.taints[0].key == "karpenter.sh/disrupted"
    assert node.labels["karpenter.sh/nodepool"] == "default"


@pytest.mark.parametrize("raw", [machine_v1beta1(), machine_v1beta2()], ids=["v1beta1", "v1beta2"])
def test_machine_view_reads_both_versions_alike(raw: dict[str, Any]) -> None:
    machine = MachineView.model_validate(raw)
    assert machine.key == "default/md-0-abcde-x1"
    assert machine.spec.cluster_name == "prod"
    assert machine.spec.provider_id == "aws:///us-west-2a/i-1"
    assert machine.spec.failure_domain == "us-west-2a"
    ref = machine.spec.infrastructure_ref
    assert ref is not None
    assert (ref.group, ref.kind, ref.name) == (
        "infrastructure.cluster.x-k8s.io",
        "AWSMachine",
        "md-0-abcde-x1",
    )
    assert machine.spec.bootstrap is not None
    assert machine.spec.bootstrap.config_ref is not None
    assert machine.spec.bootstrap.config_ref.group == "bootstrap.cluster.x-k8s.io"
    assert machine.status.phase == "Running"
    assert machine.node_name == "ip-10-0-0-1"
    # Old-style Ready and new-style Available are both found, wherever the version put them.
    for condition_type in ("Ready", "Available"):
        found = machine.status.condition(condition_type)
        assert found is not None, condition_type
        assert found.status == "True", condition_type
    assert machine.status.condition("Missing") is None


def test_machine_v1beta2_taints_and_v1beta1_annotations() -> None:
    assert MachineView.model_validate(machine_v1beta2()).spec.taints[0].propagation == "Always"
    v1 = MachineView.model_validate(machine_v1beta1())
    assert "cluster.x-k8s.io/delete-machine" in v1.metadata.annotations
    assert v1.metadata.owner_references[0].kind == "MachineSet"


@pytest.mark.parametrize("version", ["cluster.x-k8s.io/v1beta1", "cluster.x-k8s.io/v1beta2"])
def test_machine_deployment_view_reads_both_versions_alike(version: str) -> None:
    md = MachineDeploymentView.model_validate(machine_deployment(version))
    assert md.api_version == version
    assert md.replicas == 3
    assert md.spec.selector.matches({"cluster.x-k8s.io/deployment-name": "md-0"})
    assert md.template_labels == {"cluster.x-k8s.io/deployment-name": "md-0"}
    assert md.infrastructure_ref is not None
    assert md.infrastructure_ref.group == "infrastructure.cluster.x-k8s.io"
    assert md.infrastructure_ref.kind == "AWSMachineTemplate"
    assert md.failure_domain == "us-west-2a"
    assert md.cluster_name == "prod"
    assert md.annotations["capacity.cluster-autoscaler.kubernetes.io/memory"] == "16Gi"
    assert md.status.replicas == 3
    assert md.status.up_to_date == 2


def test_scalable_view_dispatches_on_kind() -> None:
    md = machine_deployment("cluster.x-k8s.io/v1beta2")
    assert isinstance(scalable_view(md), MachineDeploymentView)
    ms = {**md, "kind": "MachineSet"}
    assert isinstance(scalable_view(ms), MachineSetView)
    pool = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachinePool",
        "metadata": {"name": "mp-0", "namespace": "default"},
        "spec": {
            "clusterName": "prod",
            "failureDomains": ["us-west-2a", "us-west-2b"],
            "providerIDList": ["aws:///us-west-2a/i-1"],
            "template": {
                "spec": {
                    "clusterName": "prod",
                    "bootstrap": {},
                    "infrastructureRef": {
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                        "kind": "AWSMachinePool",
                        "name": "mp-0",
                    },
                }
            },
        },
        "status": {"replicas": 1, "nodeRefs": [{"name": "n1", "kind": "Node"}]},
    }
    view = scalable_view(pool)
    assert isinstance(view, MachinePoolView)
    assert view.replicas == 1  # unset spec.replicas defaults to 1, as CAPI's webhook does
    assert view.spec.failure_domains == ("us-west-2a", "us-west-2b")
    assert view.spec.provider_id_list == ("aws:///us-west-2a/i-1",)
    assert view.status.node_refs[0].name == "n1"
    with pytest.raises(ValueError, match="not a Cluster API scalable resource: kind 'Machine'"):
        scalable_view(machine_v1beta2())
