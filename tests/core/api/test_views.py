"""The drain's read-only Pod view: a whole Pod's JSON validates into what the drain reads,
unknown fields are ignored, and a view cannot be mutated."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from karpenter_capi.core.api.views import PodView

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
        "deletionTimestamp": "2026-01-02T03:04:05Z",
    },
    "spec": {
        "schedulerName": "default-scheduler",
        "priorityClassName": "system-node-critical",
        "terminationGracePeriodSeconds": 45,
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


def test_pod_view_reads_what_the_drain_needs() -> None:
    pod = PodView.model_validate(POD)
    assert (pod.metadata.namespace, pod.metadata.name, pod.metadata.uid) == ("shop", "web-1", "p-1")
    assert pod.metadata.annotations == {"karpenter.sh/do-not-disrupt": "true"}
    [owner] = pod.metadata.owner_references
    assert (owner.api_version, owner.kind, owner.controller) == ("apps/v1", "ReplicaSet", True)
    assert pod.metadata.deletion_timestamp == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert pod.spec.priority_class_name == "system-node-critical"
    assert pod.spec.termination_grace_period_seconds == 45
    [toleration] = pod.spec.tolerations
    assert (toleration.key, toleration.operator, toleration.effect) == (
        "example.com/gpu",
        "Exists",
        "NoSchedule",
    )
    assert pod.status.phase == "Pending"
    assert not pod.is_terminal
    assert PodView.model_validate({"status": {"phase": "Succeeded"}}).is_terminal


def test_an_empty_pod_reads_as_defaults() -> None:
    pod = PodView.model_validate({})
    assert pod.metadata.deletion_timestamp is None
    assert pod.spec.termination_grace_period_seconds is None
    assert pod.spec.tolerations == ()


def test_views_are_frozen() -> None:
    pod = PodView.model_validate(POD)
    with pytest.raises(ValidationError, match="frozen"):
        pod.metadata.name = "other"  # type: ignore[misc]
