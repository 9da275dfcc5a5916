"""In process: what the server advertises (definitions) and how manifests are loaded."""

from __future__ import annotations

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import (
    CONFIGMAPS,
    MACHINE_DEPLOYMENTS,
    MACHINES,
    NODES,
    PODS,
    Resource,
)
from karpenter_capi.sim.apiserver import InMemoryAPIServer, ResourceDefinition


def test_built_in_definitions_match_kubectl_api_resources(apiserver: InMemoryAPIServer) -> None:
    pods = apiserver.definition("", "v1", "pods")
    assert pods.kind == "Pod"
    assert pods.singular == "pod"
    assert pods.short_names == ("po",)
    assert pods.categories == ("all",)
    assert pods.subresources == {"status", "eviction", "binding"}
    assert pods.list_kind == "PodList"
    deployments = apiserver.definition("apps", "v1", "deployments")
    assert deployments.short_names == ("deploy",)
    assert deployments.subresources == {"status", "scale"}
    assert not apiserver.definition("", "v1", "nodes").namespaced
    groups = {d.group for d in apiserver.definitions()}
    assert {"", "apps", "policy", "coordination.k8s.io", "storage.k8s.io"} <= groups


def test_definition_of_unserved_version_is_404(apiserver: InMemoryAPIServer) -> None:
    with pytest.raises(NotFound):
        apiserver.definition("apps", "v1beta1", "deployments")
    with pytest.raises(NotFound):
        apiserver.definition("cluster.x-k8s.io", "v1beta2", "machines")


def test_register_cluster_api_serves_capi_with_its_columns_and_scale_paths(
    apiserver: InMemoryAPIServer,
) -> None:
    apiserver.register_cluster_api()

    machines = apiserver.definition("cluster.x-k8s.io", "v1beta1", "machines")
    assert machines.versions == ("v1beta2", "v1beta1")
    assert machines.short_names == ("ma",)
    assert [c["name"] for c in machines.printer_columns] == [
        "Cluster",
        "NodeName",
        "ProviderID",
        "Phase",
        "Age",
        "Version",
    ]
    deployments = apiserver.definition("cluster.x-k8s.io", "v1beta2", "machinedeployments")
    assert deployments.subresources == {"status", "scale"}
    assert deployments.scale_spec_path == ".spec.replicas"
    assert deployments.scale_selector_path == ".status.selector"
    assert apiserver.resource("cluster.x-k8s.io", "v1beta2", "machinedeployments") == (
        MACHINE_DEPLOYMENTS
    )
    infra = {
        d.kind for d in apiserver.definitions() if d.group == "infrastructure.cluster.x-k8s.io"
    }
    assert infra == {
        "AWSCluster",
        "AWSMachine",
        "AWSMachineTemplate",
        "AzureCluster",
        "AzureMachinePool",
        "AzureMachinePoolMachine",
        "AzureMachineTemplate",
        "DockerMachinePool",
        "DockerMachineTemplate",
    }
    # Registering twice is harmless (the CRDs are replaced, objects stay).
    apiserver.create(MACHINES, {"metadata": {"name": "m1", "namespace": "default"}})
    apiserver.register_cluster_api()
    assert len(apiserver.list(MACHINES).items) == 1


def test_definitions_are_frozen_values() -> None:
    definition = ResourceDefinition("example.com", ("v1",), "widgets", "widget", "Widget", True)
    assert definition.list_kind == "WidgetList"
    assert definition.group_resource == "widgets.example.com"
    assert definition.resource() == Resource("example.com", "v1", "widgets", "Widget", True)


def test_apply_manifests_handles_crd_and_custom_resource_in_one_pass(
    apiserver: InMemoryAPIServer,
) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    settings = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "s", "namespace": "team-a"},
        "data": {"a": "1"},
    }

    applied = apiserver.apply_manifests([widget, settings, None, namespace, crd])

    assert [o["kind"] for o in applied] == [
        "CustomResourceDefinition",
        "Namespace",
        "Widget",
        "ConfigMap",
    ]
    widgets = apiserver.resource("example.com", "v1", "widgets")
    assert apiserver.get(widgets, "w", "default")["metadata"]["namespace"] == "default"

    again = apiserver.apply_manifests([{**settings, "data": {"a": "2"}}])
    assert again[0]["data"] == {"a": "2"}
    assert again[0]["metadata"]["uid"] == applied[3]["metadata"]["uid"]


def test_apply_manifests_keeps_status(apiserver: InMemoryAPIServer) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"capacity": {"cpu": "4"}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "a", "image": "b"}], "nodeName": "n1"},
        "status": {"phase": "Running"},
    }
    apiserver.apply_manifests([node, pod])
    assert apiserver.get(NODES, "n1")["status"]["capacity"] == {"cpu": "4"}
    assert apiserver.get(PODS, "p", "default")["status"]["phase"] == "Running"

    apiserver.apply_manifests([{**pod, "status": {"phase": "Succeeded"}}])
    assert apiserver.get(PODS, "p", "default")["status"]["phase"] == "Succeeded"


def test_unknown_kind_in_manifest_is_404(apiserver: InMemoryAPIServer) -> None:
    with pytest.raises(NotFound, match='no matches for kind "Gadget"'):
        apiserver.apply_manifests([{"apiVersion": "example.com/v1", "kind": "Gadget"}])


def test_timestamps_come_from_the_injected_clock() -> None:
    clock = FakeClock()
    server = InMemoryAPIServer(clock=clock)
    created = server.create(
        CONFIGMAPS, {"metadata": {"name": "c", "namespace": "default", "finalizers": ["x/y"]}}
    )
    clock.advance(90)
    deleted = server.delete(CONFIGMAPS, "c", "default")
    assert created["metadata"]["creationTimestamp"] == "2026-01-01T00:00:00Z"
    assert deleted["metadata"]["deletionTimestamp"] == "2026-01-01T00:01:30Z"


def test_seed_keeps_status_of_custom_resources(apiserver: InMemoryAPIServer) -> None:
    apiserver.register_cluster_api()
    seeded = apiserver.seed(
        MACHINES,
        {"metadata": {"name": "m1", "namespace": "default"}, "status": {"phase": "Running"}},
    )
    assert seeded["status"] == {"phase": "Running"}


def test_pod_priority_comes_from_its_priority_class(apiserver: InMemoryAPIServer) -> None:
    classes = apiserver.resource("scheduling.k8s.io", "v1", "priorityclasses")
    apiserver.create(classes, {"metadata": {"name": "high"}, "value": 1000})
    created = apiserver.create(
        PODS,
        {
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "priorityClassName": "high",
                "containers": [
                    {
                        "name": "a",
                        "image": "b",
                        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                    }
                ],
            },
        },
    )
    assert created["spec"]["priority"] == 1000
    assert created["status"]["qosClass"] == "Guaranteed"


def test_seeded_servers_generate_the_same_names_and_uids() -> None:
    def generated(server: InMemoryAPIServer) -> tuple[str, str]:
        body = {"metadata": {"generateName": "claim-", "namespace": "default"}}
        created = server.create(CONFIGMAPS, body)
        return created["metadata"]["name"], created["metadata"]["uid"]

    first, second = InMemoryAPIServer(random_seed=7), InMemoryAPIServer(random_seed=7)
    assert [generated(first) for _ in range(3)] == [generated(second) for _ in range(3)]


def test_a_long_generate_name_is_cut_so_the_name_fits_63_characters() -> None:
    """As kube-apiserver's name generator: an Event about an object with a long name is still
    created (``<name>.`` plus five characters would be over the limit otherwise)."""
    server = InMemoryAPIServer(random_seed=7)
    body = {"metadata": {"generateName": "b" * 250 + ".", "namespace": "default"}}
    name = server.create(CONFIGMAPS, body)["metadata"]["name"]
    assert len(name) == 63
    assert name.startswith("b" * 58)
