"""Contract: status and scale subresources, CRD registration, multi-version CAPI resources."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.kube.client import KubeClient, PatchType
from karpenter_capi.core.kube.errors import Conflict, Invalid, MethodNotAllowed, NotFound
from karpenter_capi.core.kube.resources import (
    CUSTOM_RESOURCE_DEFINITIONS,
    DEPLOYMENTS,
    MACHINE_DEPLOYMENTS,
    MACHINES,
    NODES,
    PODS,
    Resource,
)
from karpenter_capi.sim.apiserver import InMemoryAPIServer

from .objects import node, pod

WIDGETS = Resource("example.com", "v1", "widgets", "Widget", True)


def _machine_deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "clusterName": "sim",
            "replicas": replicas,
            "selector": {"matchLabels": {"pool": name}},
            # CAPI's webhooks: a bootstrap, and template labels the selector matches.
            "template": {
                "metadata": {"labels": {"pool": name}},
                "spec": {
                    "clusterName": "sim",
                    "version": "v1.31.0",
                    "bootstrap": {"dataSecretName": f"{name}-bootstrap"},
                },
            },
        },
    }


def _widget_crd(*, scope: str = "Namespaced") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": scope,
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def test_main_endpoint_ignores_status_and_status_endpoint_ignores_spec(kube: KubeClient) -> None:
    created = kube.create(NODES, node("n1"))
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}

    through_main = kube.update(
        NODES,
        {**created, "spec": {**created["spec"], "unschedulable": True}, "status": ready},
    )
    assert through_main["spec"]["unschedulable"] is True
    assert "conditions" not in (through_main.get("status") or {})

    through_status = kube.update(
        NODES,
        {**through_main, "spec": {"unschedulable": False}, "status": ready},
        subresource="status",
    )
    assert through_status["status"] == ready
    assert through_status["spec"]["unschedulable"] is True
    assert through_status["metadata"].get("generation") == through_main["metadata"].get(
        "generation"
    )


def test_status_patch_changes_only_status(kube: KubeClient) -> None:
    kube.create(PODS, pod("web"))
    patched = kube.patch(
        PODS,
        "web",
        {"status": {"phase": "Running"}, "metadata": {"labels": {"ignored": "yes"}}},
        "default",
        subresource="status",
    )
    assert patched["status"]["phase"] == "Running"
    assert "ignored" not in patched["metadata"]["labels"]


def test_a_pod_s_nomination_is_set_and_cleared_through_its_status(kube: KubeClient) -> None:
    """What provisioning's nominations write: one field, a merge patch, ``null`` clears it."""
    kube.create(PODS, pod("web"))
    for value in ("node-a", None):
        patched = kube.patch(
            PODS, "web", {"status": {"nominatedNodeName": value}}, "default", subresource="status"
        )
        assert patched["status"].get("nominatedNodeName") == value
        assert patched["status"]["phase"] == "Pending"


def test_the_server_says_its_release(kube: KubeClient) -> None:
    assert kube.server_version()["gitVersion"] == "v1.31.0"


def test_pod_status_sent_on_create_is_reset_to_pending(kube: KubeClient) -> None:
    body = {**pod("web"), "status": {"phase": "Running"}}
    assert kube.create(PODS, body)["status"]["phase"] == "Pending"


def test_status_update_with_stale_version_is_conflict(kube: KubeClient) -> None:
    created = kube.create(NODES, node("n1"))
    kube.patch(NODES, "n1", {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(Conflict):
        kube.update(NODES, {**created, "status": {"phase": "Running"}}, subresource="status")


def test_deployment_scale_subresource(kube: KubeClient) -> None:
    kube.create(
        DEPLOYMENTS,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx"}]},
                },
            },
        },
    )
    scale = kube.get(DEPLOYMENTS, "web", "default", subresource="scale")
    assert scale["kind"] == "Scale"
    assert scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"]["selector"] == "app=web"

    kube.update(DEPLOYMENTS, {**scale, "spec": {"replicas": 5}}, subresource="scale")
    assert kube.get(DEPLOYMENTS, "web", "default")["spec"]["replicas"] == 5


def test_machine_deployment_scale_subresource(
    kube: KubeClient, apiserver: InMemoryAPIServer
) -> None:
    apiserver.register_cluster_api()
    created = kube.create(MACHINE_DEPLOYMENTS, _machine_deployment("pool-a", 2))
    kube.patch(
        MACHINE_DEPLOYMENTS,
        "pool-a",
        {"status": {"replicas": 2, "selector": "pool=pool-a"}},
        "default",
        subresource="status",
    )

    scale = kube.get(MACHINE_DEPLOYMENTS, "pool-a", "default", subresource="scale")
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 2, "selector": "pool=pool-a"}
    assert scale["metadata"]["name"] == "pool-a"
    assert scale["metadata"]["uid"] == created["metadata"]["uid"]

    written = kube.update(
        MACHINE_DEPLOYMENTS, {**scale, "spec": {"replicas": 3}}, subresource="scale"
    )
    assert written["spec"]["replicas"] == 3
    stored = kube.get(MACHINE_DEPLOYMENTS, "pool-a", "default")
    assert stored["spec"]["replicas"] == 3
    assert stored["metadata"]["generation"] == 2

    # The resourceVersion in a Scale is a precondition: the one read before is stale now.
    with pytest.raises(Conflict):
        kube.update(MACHINE_DEPLOYMENTS, {**scale, "spec": {"replicas": 1}}, subresource="scale")
    patched = kube.patch(
        MACHINE_DEPLOYMENTS,
        "pool-a",
        {"spec": {"replicas": 1}},
        "default",
        subresource="scale",
    )
    assert patched["spec"]["replicas"] == 1


def test_negative_scale_is_invalid(kube: KubeClient, apiserver: InMemoryAPIServer) -> None:
    apiserver.register_cluster_api()
    kube.create(MACHINE_DEPLOYMENTS, _machine_deployment("pool-a", 1))
    with pytest.raises(Invalid):
        kube.patch(
            MACHINE_DEPLOYMENTS,
            "pool-a",
            [{"op": "replace", "path": "/spec/replicas", "value": -1}],
            "default",
            patch_type=PatchType.JSON,
            subresource="scale",
        )


def test_cluster_api_is_served_as_v1beta2_and_v1beta1(
    kube: KubeClient, apiserver: InMemoryAPIServer
) -> None:
    apiserver.register_cluster_api()
    assert kube.served_versions("cluster.x-k8s.io") == ["v1beta2", "v1beta1"]
    kube.create(MACHINE_DEPLOYMENTS, _machine_deployment("pool-a", 1))

    old = kube.get(MACHINE_DEPLOYMENTS.with_version("v1beta1"), "pool-a", "default")
    new = kube.get(MACHINE_DEPLOYMENTS, "pool-a", "default")
    assert old["apiVersion"] == "cluster.x-k8s.io/v1beta1"
    assert new["apiVersion"] == "cluster.x-k8s.io/v1beta2"
    # The same object: the fields both versions keep alike are equal; the rollout strategy
    # CAPI's defaulting webhook set is where each version keeps it.
    for field in ("clusterName", "replicas", "selector", "template"):
        assert old["spec"][field] == new["spec"][field]
    assert old["spec"]["strategy"] == new["spec"]["rollout"]["strategy"]
    assert old["metadata"]["uid"] == new["metadata"]["uid"]


def test_custom_resource_status_is_dropped_on_create(
    kube: KubeClient, apiserver: InMemoryAPIServer
) -> None:
    apiserver.register_cluster_api()
    body = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": "m1", "namespace": "default"},
        "spec": {"clusterName": "sim"},
        "status": {"phase": "Running"},
    }
    assert "status" not in kube.create(MACHINES, body)


def test_custom_resource_update_needs_a_resource_version(
    kube: KubeClient, apiserver: InMemoryAPIServer
) -> None:
    apiserver.register_cluster_api()
    created = kube.create(MACHINE_DEPLOYMENTS, _machine_deployment("pool-a", 1))
    unversioned = {**created, "metadata": {"name": "pool-a", "namespace": "default"}}
    with pytest.raises(Invalid, match="must be specified for an update"):
        kube.update(MACHINE_DEPLOYMENTS, unversioned)


def test_creating_a_crd_serves_its_resource(kube: KubeClient) -> None:
    crd = kube.create(CUSTOM_RESOURCE_DEFINITIONS, _widget_crd())
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert crd["status"]["acceptedNames"]["kind"] == "Widget"
    assert kube.served_versions("example.com") == ["v1"]

    widget = kube.create(
        WIDGETS,
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w1", "namespace": "default"},
            "spec": {"size": 3},
        },
    )
    assert widget["metadata"]["generation"] == 1
    assert [w["metadata"]["name"] for w in kube.list(WIDGETS).items] == ["w1"]
    status = kube.patch(WIDGETS, "w1", {"status": {"ok": True}}, "default", subresource="status")
    assert status["status"] == {"ok": True}


def test_deleting_a_crd_stops_serving_and_deletes_objects(kube: KubeClient) -> None:
    kube.create(CUSTOM_RESOURCE_DEFINITIONS, _widget_crd())
    kube.create(WIDGETS, {"metadata": {"name": "w1", "namespace": "default"}})

    kube.delete(CUSTOM_RESOURCE_DEFINITIONS, "widgets.example.com")

    with pytest.raises(NotFound):
        kube.list(WIDGETS)
    kube.create(CUSTOM_RESOURCE_DEFINITIONS, _widget_crd())
    assert kube.list(WIDGETS).items == []


def test_deleting_a_crd_waits_for_its_objects_finalizers(kube: KubeClient) -> None:
    kube.create(CUSTOM_RESOURCE_DEFINITIONS, _widget_crd())
    held = {"name": "held", "namespace": "default", "finalizers": ["example.com/keep"]}
    kube.create(WIDGETS, {"metadata": held})
    kube.create(WIDGETS, {"metadata": {"name": "free", "namespace": "default"}})

    returned = kube.delete(CUSTOM_RESOURCE_DEFINITIONS, "widgets.example.com")

    assert returned["metadata"]["deletionTimestamp"]
    assert returned["metadata"]["finalizers"] == ["customresourcecleanup.apiextensions.k8s.io"]
    crd = kube.get(CUSTOM_RESOURCE_DEFINITIONS, "widgets.example.com")
    terminating = {c["type"]: c for c in crd["status"]["conditions"]}["Terminating"]
    assert (terminating["status"], terminating["reason"]) == ("True", "InstanceDeletionInProgress")
    [left] = kube.list(WIDGETS).items
    assert left["metadata"]["name"] == "held"
    assert left["metadata"]["deletionTimestamp"]
    with pytest.raises(MethodNotAllowed, match="create not allowed while custom resource"):
        kube.create(WIDGETS, {"metadata": {"name": "new", "namespace": "default"}})

    kube.patch(WIDGETS, "held", {"metadata": {"finalizers": None}}, "default")

    with pytest.raises(NotFound):
        kube.get(CUSTOM_RESOURCE_DEFINITIONS, "widgets.example.com")
    with pytest.raises(NotFound):
        kube.list(WIDGETS)


def test_crd_name_must_match_plural_and_group(kube: KubeClient) -> None:
    crd = _widget_crd()
    crd["metadata"]["name"] = "gadgets.example.com"
    with pytest.raises(Invalid, match=r'must be spec.names.plural\+"."\+spec.group'):
        kube.create(CUSTOM_RESOURCE_DEFINITIONS, crd)


def test_cluster_scoped_crd(kube: KubeClient) -> None:
    kube.create(CUSTOM_RESOURCE_DEFINITIONS, _widget_crd(scope="Cluster"))
    cluster_widgets = Resource("example.com", "v1", "widgets", "Widget", False)
    created = kube.create(cluster_widgets, {"metadata": {"name": "w1"}})
    assert "namespace" not in created["metadata"]
