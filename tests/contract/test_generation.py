"""Contract: ``metadata.generation``, kept and counted per kind as kube-apiserver's strategies do.

Controllers compare ``status.observedGeneration`` with ``metadata.generation`` to tell whether
they have seen the latest spec, so which writes count matters: workload kinds count spec
changes (Deployments their annotations too), custom resources everything outside metadata
(and outside status when the status subresource is enabled), and kinds such as ConfigMaps,
Pods or Nodes keep no generation at all.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.resources import (
    CONFIGMAPS,
    CUSTOM_RESOURCE_DEFINITIONS,
    DEPLOYMENTS,
    NAMESPACES,
    NODES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    REPLICASETS,
    Resource,
)

from .objects import configmap, node, pod

GADGETS = Resource("example.com", "v1", "gadgets", "Gadget", True)


def _workload(kind: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx"}]},
            },
        },
    }


def _gadget_crd(*, status_subresource: bool) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
    }
    if status_subresource:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "kind": "Gadget"},
            "versions": [version],
        },
    }


def _generation(obj: dict[str, Any]) -> int | None:
    value = obj["metadata"].get("generation")
    return None if value is None else int(value)


def test_kinds_without_a_generation_strategy_have_none(kube: KubeClient) -> None:
    created = [
        kube.create(CONFIGMAPS, configmap("settings", mode="a")),
        kube.create(PODS, pod("web")),
        kube.create(NODES, node("n1")),
        kube.create(NAMESPACES, {"metadata": {"name": "team-a"}}),
    ]
    assert [_generation(obj) for obj in created] == [None, None, None, None]

    changed = kube.update(CONFIGMAPS, {**created[0], "data": {"mode": "b"}})
    cordoned = kube.patch(NODES, "n1", {"spec": {"unschedulable": True}})
    assert (_generation(changed), _generation(cordoned)) == (None, None)


def test_replica_set_counts_spec_changes_only(kube: KubeClient) -> None:
    created = kube.create(REPLICASETS, _workload("ReplicaSet", "web"))
    assert _generation(created) == 1

    meta_only = {"metadata": {"labels": {"tier": "a"}, "annotations": {"note": "x"}}}
    relabelled = kube.patch(REPLICASETS, "web", meta_only, "default")
    status = kube.patch(
        REPLICASETS, "web", {"status": {"replicas": 1}}, "default", subresource="status"
    )
    scaled = kube.patch(REPLICASETS, "web", {"spec": {"replicas": 3}}, "default")

    assert [_generation(o) for o in (relabelled, status, scaled)] == [1, 1, 2]


def test_deployment_counts_annotation_changes_too(kube: KubeClient) -> None:
    kube.create(DEPLOYMENTS, _workload("Deployment", "web"))
    relabelled = kube.patch(DEPLOYMENTS, "web", {"metadata": {"labels": {"x": "1"}}}, "default")
    annotated = kube.patch(DEPLOYMENTS, "web", {"metadata": {"annotations": {"x": "1"}}}, "default")
    assert (_generation(relabelled), _generation(annotated)) == (1, 2)


def test_budget_status_observes_its_generation(kube: KubeClient) -> None:
    budget = kube.create(
        POD_DISRUPTION_BUDGETS,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    assert _generation(budget) == 1
    observed = kube.get(POD_DISRUPTION_BUDGETS, "web", "default")["status"]
    assert observed["observedGeneration"] == 1

    kube.patch(POD_DISRUPTION_BUDGETS, "web", {"spec": {"minAvailable": 2}}, "default")

    changed = kube.get(POD_DISRUPTION_BUDGETS, "web", "default")
    assert _generation(changed) == 2
    assert changed["status"]["observedGeneration"] == 2


def test_custom_resource_counts_everything_but_metadata_and_status(kube: KubeClient) -> None:
    kube.create(CUSTOM_RESOURCE_DEFINITIONS, _gadget_crd(status_subresource=True))
    body = {"metadata": {"name": "g", "namespace": "default"}, "spec": {"size": 1}}
    assert _generation(kube.create(GADGETS, body)) == 1

    relabelled = kube.patch(GADGETS, "g", {"metadata": {"labels": {"x": "1"}}}, "default")
    status = kube.patch(GADGETS, "g", {"status": {"ok": True}}, "default", subresource="status")
    resized = kube.patch(GADGETS, "g", {"spec": {"size": 2}}, "default")
    beyond_spec = kube.patch(GADGETS, "g", {"data": {"note": "x"}}, "default")

    assert [_generation(o) for o in (relabelled, status, resized, beyond_spec)] == [1, 1, 2, 3]


def test_custom_resource_without_status_subresource_counts_status(kube: KubeClient) -> None:
    kube.create(CUSTOM_RESOURCE_DEFINITIONS, _gadget_crd(status_subresource=False))
    kube.create(GADGETS, {"metadata": {"name": "g", "namespace": "default"}, "spec": {}})

    written = kube.patch(GADGETS, "g", {"status": {"ok": True}}, "default")

    assert written["status"] == {"ok": True}
    assert _generation(written) == 2


def test_recording_a_deletion_bumps_only_a_kept_generation(kube: KubeClient) -> None:
    kept = {"metadata": {"finalizers": ["example.com/keep"]}}
    kube.create(REPLICASETS, _workload("ReplicaSet", "web"))
    kube.patch(REPLICASETS, "web", kept, "default")
    kube.create(PODS, pod("web-1", finalizers=["example.com/keep"]))

    replica_set = kube.delete(REPLICASETS, "web", "default")
    bare_pod = kube.delete(PODS, "web-1", "default")

    assert replica_set["metadata"]["deletionTimestamp"]
    assert _generation(replica_set) == 2
    assert bare_pod["metadata"]["deletionTimestamp"]
    assert _generation(bare_pod) is None
