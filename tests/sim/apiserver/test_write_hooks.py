"""Each write hook of the in-memory API server, driven alone on a bare engine.

The server is an ``Engine`` plus the ordered ``WRITE_HOOKS``; here an engine gets only the
hook under test (and the CRD registration a CRD hook needs to have anything to clean up), so
each test shows what that one component contributes, in terms a client would see: objects
gone, namespaces finalized, resources served, budget status.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.client import PropagationPolicy
from karpenter_capi.core.kube.errors import Forbidden, Invalid, MethodNotAllowed, NotFound
from karpenter_capi.core.kube.resources import (
    CONFIGMAPS,
    CUSTOM_RESOURCE_DEFINITIONS,
    NAMESPACES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    Resource,
)
from karpenter_capi.sim.apiserver.apiextensions import CustomResourceDefinitions
from karpenter_capi.sim.apiserver.builtin import BUILTIN_DEFINITIONS
from karpenter_capi.sim.apiserver.capi_crds import crd
from karpenter_capi.sim.apiserver.crd_cleanup import CRD_CLEANUP_FINALIZER, CrdCleanup
from karpenter_capi.sim.apiserver.disruption_budgets import DisruptionBudgets
from karpenter_capi.sim.apiserver.engine import Engine
from karpenter_capi.sim.apiserver.garbage_collector import GarbageCollector
from karpenter_capi.sim.apiserver.namespace_lifecycle import NamespaceLifecycle
from karpenter_capi.sim.apiserver.objects import copy_object
from karpenter_capi.sim.apiserver.write_hook import HookFactory

JsonObject = dict[str, Any]
WIDGETS = Resource("example.com", "v1", "widgets", "Widget", True)


class Cluster:
    """A bare engine with the given hooks, and the few verbs the tests need."""

    def __init__(self, *hooks: HookFactory) -> None:
        self.engine = Engine(FakeClock(), 1000, 7, hooks)
        for definition in BUILTIN_DEFINITIONS:
            self.engine.serve(definition)
        self.create(NAMESPACES, {"metadata": {"name": "default"}})

    def create(self, resource: Resource, obj: JsonObject, namespace: str | None = None) -> Any:
        definition, table = self.engine.resolve(resource)
        with self.engine.lock:
            return self.engine.create_object(
                definition, table, copy_object(obj), namespace, resource.version, keep_status=True
            )

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> Any:
        definition, table = self.engine.resolve(resource)
        try:
            return self.engine.get_stored(definition, table, name, namespace)
        except NotFound:
            return None

    def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None:
        self.delete_as(None, resource, name, namespace)

    def delete_as(
        self, policy: PropagationPolicy | None, resource: Resource, name: str, namespace: str | None
    ) -> None:
        definition, table = self.engine.resolve(resource)
        with self.engine.lock:
            stored = self.engine.get_stored(definition, table, name, namespace)
            self.engine.delete_object(table, stored, policy, None)

    def set_finalizers(
        self, resource: Resource, name: str, namespace: str | None, finalizers: list[str]
    ) -> None:
        definition, table = self.engine.resolve(resource)
        with self.engine.lock:
            stored = self.engine.get_stored(definition, table, name, namespace)
            new = copy_object(stored)
            new["metadata"]["finalizers"] = finalizers
            self.engine.update_object(table, stored, new, precondition=None)


def _owned_config_map(cluster: Cluster, name: str, owner: JsonObject, **meta: Any) -> None:
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        **meta.pop("ref", {}),
    }
    cluster.create(
        CONFIGMAPS, {"metadata": {"name": name, "ownerReferences": [ref], **meta}}, "default"
    )


# ---------------------------------------------------------------------- garbage collection


def test_without_the_collector_a_dependent_outlives_its_owner() -> None:
    cluster = Cluster()
    owner = cluster.create(CONFIGMAPS, {"metadata": {"name": "owner"}}, "default")
    _owned_config_map(cluster, "dependent", owner)

    cluster.delete(CONFIGMAPS, "owner", "default")

    assert cluster.get(CONFIGMAPS, "owner", "default") is None
    assert cluster.get(CONFIGMAPS, "dependent", "default") is not None


def test_the_collector_deletes_a_dependent_with_its_owner() -> None:
    cluster = Cluster(GarbageCollector)
    owner = cluster.create(CONFIGMAPS, {"metadata": {"name": "owner"}}, "default")
    _owned_config_map(cluster, "dependent", owner)

    cluster.delete(CONFIGMAPS, "owner", "default")

    assert cluster.get(CONFIGMAPS, "dependent", "default") is None


def test_orphan_policy_keeps_the_dependent_without_its_owner_reference() -> None:
    cluster = Cluster(GarbageCollector)
    owner = cluster.create(CONFIGMAPS, {"metadata": {"name": "owner"}}, "default")
    _owned_config_map(cluster, "dependent", owner)

    cluster.delete_as(PropagationPolicy.ORPHAN, CONFIGMAPS, "owner", "default")

    assert cluster.get(CONFIGMAPS, "owner", "default") is None
    dependent = cluster.get(CONFIGMAPS, "dependent", "default")
    assert "ownerReferences" not in dependent["metadata"]


def test_foreground_deletion_waits_for_a_blocking_dependent() -> None:
    cluster = Cluster(GarbageCollector)
    owner = cluster.create(CONFIGMAPS, {"metadata": {"name": "owner"}}, "default")
    _owned_config_map(
        cluster, "dependent", owner, ref={"blockOwnerDeletion": True}, finalizers=["example/hold"]
    )

    cluster.delete_as(PropagationPolicy.FOREGROUND, CONFIGMAPS, "owner", "default")

    waiting = cluster.get(CONFIGMAPS, "owner", "default")
    assert waiting["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert cluster.get(CONFIGMAPS, "dependent", "default")["metadata"]["deletionTimestamp"]

    cluster.set_finalizers(CONFIGMAPS, "dependent", "default", [])

    assert cluster.get(CONFIGMAPS, "dependent", "default") is None
    assert cluster.get(CONFIGMAPS, "owner", "default") is None


# ----------------------------------------------------------------------- namespace lifecycle


def test_without_namespace_lifecycle_a_namespace_goes_and_leaves_its_content() -> None:
    cluster = Cluster()
    cluster.create(NAMESPACES, {"metadata": {"name": "team"}})
    cluster.create(CONFIGMAPS, {"metadata": {"name": "settings"}}, "team")

    cluster.delete(NAMESPACES, "team")

    assert cluster.get(NAMESPACES, "team") is None
    assert cluster.get(CONFIGMAPS, "settings", "team") is not None


def test_deleting_a_namespace_deletes_its_content_then_the_namespace() -> None:
    cluster = Cluster(NamespaceLifecycle)
    cluster.create(NAMESPACES, {"metadata": {"name": "team"}})
    cluster.create(CONFIGMAPS, {"metadata": {"name": "settings"}}, "team")
    cluster.create(
        CONFIGMAPS, {"metadata": {"name": "held", "finalizers": ["example/hold"]}}, "team"
    )

    cluster.delete(NAMESPACES, "team")

    terminating = cluster.get(NAMESPACES, "team")
    assert terminating["status"]["phase"] == "Terminating"
    assert cluster.get(CONFIGMAPS, "settings", "team") is None
    with pytest.raises(Forbidden, match="being terminated"):
        cluster.create(CONFIGMAPS, {"metadata": {"name": "late"}}, "team")

    cluster.set_finalizers(CONFIGMAPS, "held", "team", [])

    assert cluster.get(NAMESPACES, "team") is None


# ------------------------------------------------------------------------ CRD registration


def _widget_crd() -> JsonObject:
    """A Widget CRD whose ``spec.size`` must be a positive integer."""
    widget = crd("example.com", "Widget", "widgets", ("v1",))
    size = {"type": "integer", "minimum": 1}
    spec = {"type": "object", "properties": {"size": size}}
    openapi = {"type": "object", "properties": {"spec": spec}}
    widget["spec"]["versions"][0]["schema"] = {"openAPIV3Schema": openapi}
    return widget


def test_without_crd_registration_a_crd_serves_nothing() -> None:
    cluster = Cluster()
    cluster.create(CUSTOM_RESOURCE_DEFINITIONS, _widget_crd())

    with pytest.raises(NotFound):
        cluster.engine.resolve(WIDGETS)


def test_a_created_crd_serves_its_kind_validated_by_its_schema() -> None:
    cluster = Cluster(CustomResourceDefinitions)
    crd = cluster.create(CUSTOM_RESOURCE_DEFINITIONS, _widget_crd())

    assert {c["type"] for c in crd["status"]["conditions"]} >= {"Established"}
    stored = cluster.create(
        WIDGETS, {"metadata": {"name": "w"}, "spec": {"size": 2, "colour": "red"}}, "default"
    )
    assert stored["spec"] == {"size": 2}  # pruned to the schema
    with pytest.raises(Invalid, match=r"spec\.size"):
        cluster.create(WIDGETS, {"metadata": {"name": "small"}, "spec": {"size": 0}}, "default")

    cluster.delete(CUSTOM_RESOURCE_DEFINITIONS, "widgets.example.com")

    with pytest.raises(NotFound):
        cluster.engine.resolve(WIDGETS)


def test_a_crd_without_a_storage_version_is_refused() -> None:
    cluster = Cluster(CustomResourceDefinitions)
    crd = _widget_crd()
    crd["spec"]["versions"][0]["storage"] = False

    with pytest.raises(Invalid, match="storage version"):
        cluster.create(CUSTOM_RESOURCE_DEFINITIONS, crd)


# ----------------------------------------------------------------------------- CRD cleanup


def test_a_deleted_crd_waits_for_its_objects_and_refuses_new_ones() -> None:
    cluster = Cluster(CustomResourceDefinitions, CrdCleanup)
    cluster.create(CUSTOM_RESOURCE_DEFINITIONS, _widget_crd())
    cluster.create(WIDGETS, {"metadata": {"name": "plain"}}, "default")
    cluster.create(
        WIDGETS, {"metadata": {"name": "held", "finalizers": ["example/hold"]}}, "default"
    )

    cluster.delete(CUSTOM_RESOURCE_DEFINITIONS, "widgets.example.com")

    crd = cluster.get(CUSTOM_RESOURCE_DEFINITIONS, "widgets.example.com")
    assert CRD_CLEANUP_FINALIZER in crd["metadata"]["finalizers"]
    terminating = next(c for c in crd["status"]["conditions"] if c["type"] == "Terminating")
    assert terminating["status"] == "True"
    assert cluster.get(WIDGETS, "plain", "default") is None
    with pytest.raises(MethodNotAllowed):
        cluster.create(WIDGETS, {"metadata": {"name": "late"}}, "default")

    cluster.set_finalizers(WIDGETS, "held", "default", [])

    assert cluster.get(CUSTOM_RESOURCE_DEFINITIONS, "widgets.example.com") is None
    with pytest.raises(NotFound):
        cluster.engine.resolve(WIDGETS)


# ---------------------------------------------------------------------- disruption budgets


def _ready_pod(name: str) -> JsonObject:
    return {
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "web"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _budget_over_two_web_pods(cluster: Cluster) -> Cluster:
    """A ``minAvailable: 1`` budget over two Ready ``app=web`` pods."""
    selector = {"matchLabels": {"app": "web"}}
    budget = {"metadata": {"name": "web"}, "spec": {"minAvailable": 1, "selector": selector}}
    cluster.create(POD_DISRUPTION_BUDGETS, budget, "default")
    for name in ("web-1", "web-2"):
        cluster.create(PODS, _ready_pod(name), "default")
    return cluster


def test_a_budget_status_follows_the_pods_it_selects() -> None:
    cluster = _budget_over_two_web_pods(Cluster(DisruptionBudgets))

    status = cluster.get(POD_DISRUPTION_BUDGETS, "web", "default")["status"]
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (2, 1)

    cluster.delete_as(PropagationPolicy.BACKGROUND, PODS, "web-2", "default")

    status = cluster.get(POD_DISRUPTION_BUDGETS, "web", "default")["status"]
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (1, 0)


def test_without_the_disruption_controller_a_budget_status_ignores_the_pods() -> None:
    cluster = _budget_over_two_web_pods(Cluster())

    status = cluster.get(POD_DISRUPTION_BUDGETS, "web", "default").get("status") or {}
    assert status.get("currentHealthy", 0) == 0
    assert status.get("disruptionsAllowed", 0) == 0
