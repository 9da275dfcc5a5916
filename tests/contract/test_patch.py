"""Contract: JSON merge patch, JSON patch and strategic merge patch, as kube applies them."""

from __future__ import annotations

import pytest

from karpenter_capi.core.kube.client import KubeClient, PatchType
from karpenter_capi.core.kube.errors import Conflict, Invalid, NotFound
from karpenter_capi.core.kube.resources import CONFIGMAPS, DEPLOYMENTS, NODES, PODS

from .objects import configmap, node, pod


def test_merge_patch_merges_maps_and_null_deletes(kube: KubeClient) -> None:
    kube.create(PODS, pod("web", labels={"app": "web", "tier": "front"}))

    patched = kube.patch(
        PODS, "web", {"metadata": {"labels": {"tier": None, "team": "a"}}}, "default"
    )

    assert patched["metadata"]["labels"] == {"app": "web", "team": "a"}


def test_merge_patch_replaces_lists(kube: KubeClient) -> None:
    kube.create(PODS, pod("web", finalizers=["a/one", "a/two"]))
    patched = kube.patch(PODS, "web", {"metadata": {"finalizers": ["a/three"]}}, "default")
    assert patched["metadata"]["finalizers"] == ["a/three"]


def test_merge_patch_of_missing_object_is_404(kube: KubeClient) -> None:
    with pytest.raises(NotFound, match='pods "ghost" not found'):
        kube.patch(PODS, "ghost", {"metadata": {"labels": {"a": "b"}}}, "default")


def test_resource_version_in_a_merge_patch_is_a_precondition(kube: KubeClient) -> None:
    created = kube.create(CONFIGMAPS, configmap("settings", mode="a"))
    version = created["metadata"]["resourceVersion"]
    kube.patch(CONFIGMAPS, "settings", {"data": {"mode": "b"}}, "default")

    with pytest.raises(Conflict):
        kube.patch(
            CONFIGMAPS,
            "settings",
            {"metadata": {"resourceVersion": version}, "data": {"mode": "c"}},
            "default",
        )
    current = kube.get(CONFIGMAPS, "settings", "default")
    fresh = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}}
    written = kube.patch(CONFIGMAPS, "settings", {**fresh, "data": {"mode": "c"}}, "default")
    assert written["data"] == {"mode": "c"}


def test_json_patch_operations(kube: KubeClient) -> None:
    kube.create(
        CONFIGMAPS,
        {
            "metadata": {
                "name": "settings",
                "namespace": "default",
                "annotations": {"example.com/owner": "1"},
                "finalizers": ["x/one"],
            },
            "data": {"keep": "1", "old": "2"},
        },
    )
    patched = kube.patch(
        CONFIGMAPS,
        "settings",
        [
            {"op": "test", "path": "/data/keep", "value": "1"},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "x/two"},
            {"op": "add", "path": "/metadata/finalizers/0", "value": "x/zero"},
            {"op": "replace", "path": "/metadata/annotations/example.com~1owner", "value": "9"},
            {"op": "move", "from": "/data/old", "path": "/data/new"},
            {"op": "copy", "from": "/data/keep", "path": "/data/copied"},
            {"op": "remove", "path": "/data/keep"},
        ],
        "default",
        patch_type=PatchType.JSON,
    )

    assert patched["metadata"]["finalizers"] == ["x/zero", "x/one", "x/two"]
    assert patched["metadata"]["annotations"] == {"example.com/owner": "9"}
    assert patched["data"] == {"new": "2", "copied": "1"}


def test_failed_json_patch_test_changes_nothing(kube: KubeClient) -> None:
    created = kube.create(CONFIGMAPS, configmap("settings", mode="a"))
    with pytest.raises(Invalid):
        kube.patch(
            CONFIGMAPS,
            "settings",
            [
                {"op": "replace", "path": "/data/mode", "value": "b"},
                {"op": "test", "path": "/data/mode", "value": "a"},
            ],
            "default",
            patch_type=PatchType.JSON,
        )
    assert kube.get(CONFIGMAPS, "settings", "default") == created


def test_json_patch_on_missing_path_is_422(kube: KubeClient) -> None:
    kube.create(CONFIGMAPS, configmap("settings"))
    with pytest.raises(Invalid):
        kube.patch(
            CONFIGMAPS,
            "settings",
            [{"op": "replace", "path": "/data/nothing/here", "value": "x"}],
            "default",
            patch_type=PatchType.JSON,
        )


def test_strategic_patch_merges_containers_by_name(kube: KubeClient) -> None:
    body = pod("web")
    body["spec"]["containers"] = [
        {"name": "app", "image": "nginx:1", "env": [{"name": "A", "value": "1"}]},
        {"name": "sidecar", "image": "envoy:1"},
    ]
    kube.create(PODS, body)

    patched = kube.patch(
        PODS,
        "web",
        {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}},
        "default",
        patch_type=PatchType.STRATEGIC,
    )

    containers = patched["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [
        ("app", "nginx:2"),
        ("sidecar", "envoy:1"),
    ]
    assert containers[0]["env"] == [{"name": "A", "value": "1"}]


def test_strategic_patch_merges_finalizers_as_a_set(kube: KubeClient) -> None:
    kube.create(PODS, pod("web", finalizers=["a/one"]))
    patched = kube.patch(
        PODS,
        "web",
        {"metadata": {"finalizers": ["a/one", "a/two"]}},
        "default",
        patch_type=PatchType.STRATEGIC,
    )
    assert patched["metadata"]["finalizers"] == ["a/one", "a/two"]

    removed = kube.patch(
        PODS,
        "web",
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/one"]}},
        "default",
        patch_type=PatchType.STRATEGIC,
    )
    assert removed["metadata"]["finalizers"] == ["a/two"]


def test_strategic_patch_merges_node_conditions_by_type(kube: KubeClient) -> None:
    created = kube.create(NODES, node("n1"))
    conditions = [
        {"type": "Ready", "status": "False", "reason": "Starting"},
        {"type": "MemoryPressure", "status": "False"},
    ]
    kube.update(NODES, {**created, "status": {"conditions": conditions}}, subresource="status")

    patched = kube.patch(
        NODES,
        "n1",
        {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}},
        patch_type=PatchType.STRATEGIC,
        subresource="status",
    )

    by_type = {c["type"]: c for c in patched["status"]["conditions"]}
    assert by_type["Ready"]["status"] == "True"
    assert by_type["Ready"]["reason"] == "KubeletReady"
    assert by_type["MemoryPressure"]["status"] == "False"


def test_strategic_patch_replaces_taints_as_kube_does(kube: KubeClient) -> None:
    created = kube.create(NODES, node("n1"))
    taint_a = {"key": "a", "effect": "NoSchedule"}
    taint_b = {"key": "b", "effect": "NoExecute"}
    kube.update(NODES, {**created, "spec": {**created["spec"], "taints": [taint_a]}})

    patched = kube.patch(
        NODES, "n1", {"spec": {"taints": [taint_b]}}, patch_type=PatchType.STRATEGIC
    )

    assert patched["spec"]["taints"] == [taint_b]


def test_strategic_patch_delete_directive_removes_a_list_element(kube: KubeClient) -> None:
    containers = [
        {"name": "app", "image": "nginx", "ports": [{"containerPort": 80}, {"containerPort": 443}]},
        {"name": "sidecar", "image": "envoy"},
    ]
    kube.create(
        DEPLOYMENTS,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": containers},
                },
            },
        },
    )

    patched = kube.patch(
        DEPLOYMENTS,
        "web",
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "sidecar", "$patch": "delete"},
                            {"name": "app", "ports": [{"containerPort": 8080}]},
                        ]
                    }
                }
            }
        },
        "default",
        patch_type=PatchType.STRATEGIC,
    )

    [app] = patched["spec"]["template"]["spec"]["containers"]
    assert app["name"] == "app"
    assert [p["containerPort"] for p in app["ports"]] == [80, 443, 8080]
    assert patched["metadata"]["generation"] == 2
