"""Cluster API's core kinds at each served version: stored at v1beta2, converted on every read
and write at v1beta1, as CAPI's conversion webhook does (cluster-api
api/core/v1beta1/conversion.go, core/webhooks/conversion/*.go).

What a client of either version notices: the fields it reads are where its version keeps them,
whatever version another client wrote them at.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from karpenter_capi.core.kube.errors import InternalError
from karpenter_capi.core.kube.resources import (
    MACHINE_DEPLOYMENTS,
    MACHINE_POOLS,
    MACHINE_SETS,
    MACHINES,
    Resource,
)
from karpenter_capi.sim.apiserver import InMemoryAPIServer

NS = "default"
DATA = "cluster.x-k8s.io/conversion-data"


def at(resource: Resource, version: str) -> Resource:
    return resource.with_version(version)


@pytest.fixture
def capi(apiserver: InMemoryAPIServer) -> InMemoryAPIServer:
    apiserver.register_cluster_api()
    return apiserver


def v1beta1_template() -> dict[str, Any]:
    return {
        "metadata": {"labels": {"pool": "workers"}},
        "spec": {
            "clusterName": "demo",
            "version": "v1.31.0",
            "bootstrap": {
                "configRef": {
                    "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                    "kind": "KubeadmConfigTemplate",
                    "name": "workers",
                    "namespace": NS,
                }
            },
            "infrastructureRef": {
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "AWSMachineTemplate",
                "name": "workers",
                "namespace": NS,
            },
            "nodeDrainTimeout": "1m30s",
        },
    }


def v1beta1_deployment() -> dict[str, Any]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {
            "name": "workers",
            "annotations": {"capacity.cluster-autoscaler.kubernetes.io/cpu": "4"},
        },
        "spec": {
            "clusterName": "demo",
            "replicas": 2,
            "minReadySeconds": 10,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": {"pool": "workers"}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0, "deletePolicy": "Oldest"},
            },
            "template": v1beta1_template(),
        },
    }


def test_a_deployment_written_at_v1beta1_reads_in_v1beta2_layout(capi: InMemoryAPIServer) -> None:
    capi.create(at(MACHINE_DEPLOYMENTS, "v1beta1"), v1beta1_deployment(), NS)
    md = capi.get(at(MACHINE_DEPLOYMENTS, "v1beta2"), "workers", NS)
    spec = md["spec"]
    assert spec["rollout"] == {
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    }
    assert spec["deletion"] == {"order": "Oldest"}
    assert "strategy" not in spec
    assert "revisionHistoryLimit" not in spec
    template = spec["template"]["spec"]
    assert template["infrastructureRef"] == {
        "apiGroup": "infrastructure.cluster.x-k8s.io",
        "kind": "AWSMachineTemplate",
        "name": "workers",
    }
    assert template["bootstrap"]["configRef"]["apiGroup"] == "bootstrap.cluster.x-k8s.io"
    assert template["minReadySeconds"] == 10
    assert template["deletion"] == {"nodeDrainTimeoutSeconds": 90}
    # What the autoprovisioner relies on is the same in both versions.
    assert spec["replicas"] == 2
    assert spec["clusterName"] == "demo"
    assert md["metadata"]["annotations"] == {"capacity.cluster-autoscaler.kubernetes.io/cpu": "4"}
    # (plus the cluster-name label CAPI's defaulting webhook adds)
    assert spec["template"]["metadata"]["labels"] == {
        "pool": "workers",
        "cluster.x-k8s.io/cluster-name": "demo",
    }


def test_a_deployment_written_at_v1beta2_reads_back_at_v1beta1(capi: InMemoryAPIServer) -> None:
    capi.create(at(MACHINE_DEPLOYMENTS, "v1beta1"), v1beta1_deployment(), NS)
    old = capi.get(at(MACHINE_DEPLOYMENTS, "v1beta1"), "workers", NS)
    assert old["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0, "deletePolicy": "Oldest"},
    }
    assert old["spec"]["minReadySeconds"] == 10
    template = old["spec"]["template"]["spec"]
    # The reference's apiVersion is the referenced kind's served version.
    assert template["infrastructureRef"] == {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "AWSMachineTemplate",
        "name": "workers",
        "namespace": NS,
    }
    assert template["bootstrap"]["configRef"]["apiVersion"] == "bootstrap.cluster.x-k8s.io/v1beta2"
    assert template["nodeDrainTimeout"] == "1m30s"
    assert "deletion" not in template
    assert "minReadySeconds" not in template


def test_scaling_at_one_version_shows_at_the_other(capi: InMemoryAPIServer) -> None:
    capi.create(at(MACHINE_DEPLOYMENTS, "v1beta1"), v1beta1_deployment(), NS)
    old = at(MACHINE_DEPLOYMENTS, "v1beta1")
    scale = capi.get(old, "workers", NS, subresource="scale")
    patch = {"metadata": {"resourceVersion": scale["metadata"]["resourceVersion"]}}
    capi.patch(old, "workers", {**patch, "spec": {"replicas": 5}}, NS, subresource="scale")
    assert capi.get(at(MACHINE_DEPLOYMENTS, "v1beta2"), "workers", NS)["spec"]["replicas"] == 5
    # An annotation written at v1beta1 leaves the v1beta2-only fields alone.
    capi.patch(old, "workers", {"metadata": {"annotations": {"x": "y"}}}, NS)
    md = capi.get(at(MACHINE_DEPLOYMENTS, "v1beta2"), "workers", NS)
    assert md["spec"]["deletion"] == {"order": "Oldest"}
    assert md["metadata"]["annotations"]["x"] == "y"


def test_deployment_status_counters_move_between_versions(capi: InMemoryAPIServer) -> None:
    capi.create(at(MACHINE_DEPLOYMENTS, "v1beta1"), v1beta1_deployment(), NS)
    new = at(MACHINE_DEPLOYMENTS, "v1beta2")
    status = {
        "replicas": 3,
        "readyReplicas": 2,
        "availableReplicas": 2,
        "upToDateReplicas": 1,
        "conditions": [{"type": "Available", "status": "True", "reason": "Available"}],
        "deprecated": {
            "v1beta1": {
                "readyReplicas": 2,
                "availableReplicas": 2,
                "updatedReplicas": 1,
                "unavailableReplicas": 1,
            }
        },
    }
    capi.patch(new, "workers", {"status": status}, NS, subresource="status")
    old = capi.get(at(MACHINE_DEPLOYMENTS, "v1beta1"), "workers", NS)["status"]
    assert (old["replicas"], old["readyReplicas"], old["updatedReplicas"]) == (3, 2, 1)
    assert old["unavailableReplicas"] == 1
    assert old["v1beta2"]["upToDateReplicas"] == 1
    assert old["v1beta2"]["conditions"][0]["type"] == "Available"
    assert "deprecated" not in old
    assert "upToDateReplicas" not in old


def test_machine_set_deletion_order(capi: InMemoryAPIServer) -> None:
    ms = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineSet",
        "metadata": {"name": "workers-1"},
        "spec": {
            "clusterName": "demo",
            "replicas": 1,
            "deletePolicy": "Newest",
            "selector": {"matchLabels": {"pool": "workers"}},
            "template": v1beta1_template(),
        },
    }
    capi.create(at(MACHINE_SETS, "v1beta1"), ms, NS)
    assert capi.get(at(MACHINE_SETS, "v1beta2"), "workers-1", NS)["spec"]["deletion"] == {
        "order": "Newest"
    }
    assert capi.get(at(MACHINE_SETS, "v1beta1"), "workers-1", NS)["spec"]["deletePolicy"] == (
        "Newest"
    )


def test_machine_status_at_v1beta1(capi: InMemoryAPIServer) -> None:
    machine = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": "m-1", "annotations": {"cluster.x-k8s.io/delete-machine": "yes"}},
        "spec": {
            "clusterName": "demo",
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "AWSMachine",
                "name": "m-1",
            },
            "providerID": "aws:///us-east-1a/i-0123",
        },
    }
    capi.create(at(MACHINES, "v1beta2"), machine, NS)
    status = {
        "phase": "Updating",
        "nodeRef": {"name": "ip-10-0-0-1"},
        "initialization": {"infrastructureProvisioned": True},
        "deprecated": {"v1beta1": {"failureReason": "UpdateError", "failureMessage": "boom"}},
    }
    capi.patch(at(MACHINES, "v1beta2"), "m-1", {"status": status}, NS, subresource="status")
    old = capi.get(at(MACHINES, "v1beta1"), "m-1", NS)
    assert old["status"]["nodeRef"] == {"apiVersion": "v1", "kind": "Node", "name": "ip-10-0-0-1"}
    assert (old["status"]["infrastructureReady"], old["status"]["bootstrapReady"]) == (True, False)
    assert (old["status"]["failureReason"], old["status"]["failureMessage"]) == (
        "UpdateError",
        "boom",
    )
    assert old["status"]["phase"] == "Running"  # v1beta1 has no Updating phase
    assert old["spec"]["providerID"] == "aws:///us-east-1a/i-0123"
    annotations = old["metadata"]["annotations"]
    assert annotations["cluster.x-k8s.io/delete-machine"] == "yes"
    assert json.loads(annotations[DATA])["status"]["phase"] == "Updating"


def test_machine_pool_ready_flags_written_at_v1beta1(capi: InMemoryAPIServer) -> None:
    pool = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachinePool",
        "metadata": {"name": "pool"},
        "spec": {
            "clusterName": "demo",
            "replicas": 1,
            "template": {
                "spec": {
                    "clusterName": "demo",
                    "bootstrap": {"dataSecretName": "s"},
                    "infrastructureRef": {
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                        "kind": "AzureMachinePool",
                        "name": "pool",
                    },
                }
            },
        },
    }
    capi.create(at(MACHINE_POOLS, "v1beta1"), pool, NS)
    status = {"infrastructureReady": True, "bootstrapReady": True, "readyReplicas": 1}
    capi.patch(at(MACHINE_POOLS, "v1beta1"), "pool", {"status": status}, NS, subresource="status")
    new = capi.get(at(MACHINE_POOLS, "v1beta2"), "pool", NS)["status"]
    assert new["initialization"] == {
        "bootstrapDataSecretCreated": True,
        "infrastructureProvisioned": True,
    }
    assert new["deprecated"]["v1beta1"]["readyReplicas"] == 1
    assert "readyReplicas" not in new  # the v1beta1 counter has another meaning


def test_a_reference_to_a_kind_nobody_serves_cannot_be_read_at_v1beta1(
    capi: InMemoryAPIServer,
) -> None:
    machine = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": "m-1"},
        "spec": {
            "clusterName": "demo",
            "infrastructureRef": {"apiGroup": "example.com", "kind": "Nothing", "name": "m-1"},
        },
    }
    capi.create(at(MACHINES, "v1beta2"), machine, NS)
    with pytest.raises(InternalError) as failed:
        capi.get(at(MACHINES, "v1beta1"), "m-1", NS)
    assert "failed to convert object" in str(failed.value)
    assert "Nothing.example.com" in str(failed.value)


def _machine_v1beta2() -> dict[str, Any]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": "m-1", "annotations": {"team": "a"}},
        "spec": {
            "clusterName": "demo",
            "minReadySeconds": 30,
            "bootstrap": {"dataSecretName": "s"},
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "AWSMachine",
                "name": "m-1",
            },
        },
    }


def test_a_v1beta1_round_trip_keeps_what_only_v1beta2_holds(capi: InMemoryAPIServer) -> None:
    """util/conversion ``MarshalData``/``UnmarshalData``: a v1beta1 client that reads, changes
    and writes back a Machine does not erase its v1beta2-only fields."""
    capi.create(at(MACHINES, "v1beta2"), _machine_v1beta2(), NS)
    status = {
        "phase": "Updating",
        "initialization": {"infrastructureProvisioned": True, "bootstrapDataSecretCreated": False},
    }
    capi.patch(at(MACHINES, "v1beta2"), "m-1", {"status": status}, NS, subresource="status")

    old = capi.get(at(MACHINES, "v1beta1"), "m-1", NS)
    assert "minReadySeconds" not in old["spec"]  # v1beta1's Machine has no such field
    old["metadata"]["annotations"]["team"] = "b"
    capi.update(at(MACHINES, "v1beta1"), old)
    capi.update(at(MACHINES, "v1beta1"), capi.get(at(MACHINES, "v1beta1"), "m-1", NS))
    # A status write at v1beta1 through the status subresource keeps them too.
    old = capi.get(at(MACHINES, "v1beta1"), "m-1", NS)
    capi.update(at(MACHINES, "v1beta1"), old, subresource="status")

    new = capi.get(at(MACHINES, "v1beta2"), "m-1", NS)
    assert new["spec"]["minReadySeconds"] == 30
    assert new["status"]["phase"] == "Updating"
    assert new["status"]["initialization"] == {
        "infrastructureProvisioned": True,
        "bootstrapDataSecretCreated": False,
    }
    # The annotation is the converter's own: never stored, never shown at v1beta2.
    assert new["metadata"]["annotations"] == {"team": "b"}


def test_without_the_annotation_v1beta1_wins(capi: InMemoryAPIServer) -> None:
    capi.create(at(MACHINES, "v1beta2"), _machine_v1beta2(), NS)
    old = capi.get(at(MACHINES, "v1beta1"), "m-1", NS)
    del old["metadata"]["annotations"][DATA]
    capi.update(at(MACHINES, "v1beta1"), old)
    assert "minReadySeconds" not in capi.get(at(MACHINES, "v1beta2"), "m-1", NS)["spec"]


def test_an_explicit_paused_false_survives_v1beta1(capi: InMemoryAPIServer) -> None:
    capi.create(at(MACHINE_DEPLOYMENTS, "v1beta1"), v1beta1_deployment(), NS)
    capi.patch(at(MACHINE_DEPLOYMENTS, "v1beta2"), "workers", {"spec": {"paused": False}}, NS)
    old = capi.get(at(MACHINE_DEPLOYMENTS, "v1beta1"), "workers", NS)
    assert "paused" not in old["spec"]  # a bool with omitempty at v1beta1
    old["spec"]["replicas"] = 3
    capi.update(at(MACHINE_DEPLOYMENTS, "v1beta1"), old)
    new = capi.get(at(MACHINE_DEPLOYMENTS, "v1beta2"), "workers", NS)
    assert (new["spec"]["replicas"], new["spec"]["paused"]) == (3, False)


def test_a_machine_set_carries_no_conversion_data(capi: InMemoryAPIServer) -> None:
    body = v1beta1_deployment()
    body["kind"] = "MachineSet"
    for field in ("strategy", "revisionHistoryLimit"):
        del body["spec"][field]
    capi.create(at(MACHINE_SETS, "v1beta1"), body, NS)
    old = capi.get(at(MACHINE_SETS, "v1beta1"), "workers", NS)
    assert DATA not in old["metadata"]["annotations"]


def test_a_shared_list_converts_as_a_copied_list_does(capi: InMemoryAPIServer) -> None:
    """The simulator's observers list without copies (``shared``); what they read is still each
    version's layout, never the stored object at another version."""
    capi.create(at(MACHINE_DEPLOYMENTS, "v1beta1"), v1beta1_deployment(), NS)
    for version in ("v1beta1", "v1beta2"):
        resource = at(MACHINE_DEPLOYMENTS, version)
        [copied] = capi.list(resource, NS).items
        [shared] = capi.list(resource, NS, shared=True).items
        assert shared == copied
        assert shared["apiVersion"] == f"cluster.x-k8s.io/{version}"
