"""Contract: create, get, list, update and delete, with kube's errors and metadata rules.

Runs against every transport through the ``kube`` fixture (in process and over HTTP), so any
code written against ``KubeClient`` sees the same Kubernetes behaviour on both.
"""

from __future__ import annotations

import pytest

from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Invalid,
    NotFound,
)
from karpenter_capi.core.kube.resources import CONFIGMAPS, NAMESPACES, PODS, Resource

from .objects import configmap, pod


def test_create_fills_server_metadata_and_get_returns_it(kube: KubeClient) -> None:
    created = kube.create(PODS, pod("web-1", labels={"app": "web"}))

    meta = created["metadata"]
    assert created["apiVersion"] == "v1"
    assert created["kind"] == "Pod"
    assert meta["uid"]
    assert int(meta["resourceVersion"]) > 0
    assert "generation" not in meta  # kube 1.31 keeps no generation for pods
    assert meta["creationTimestamp"].endswith("Z")
    assert created["status"]["phase"] == "Pending"
    assert kube.get(PODS, "web-1", "default") == created


def test_resource_versions_increase_with_every_write(kube: KubeClient) -> None:
    first = kube.create(CONFIGMAPS, configmap("a", x="1"))
    second = kube.create(CONFIGMAPS, configmap("b", x="1"))
    updated = kube.update(CONFIGMAPS, {**first, "data": {"x": "2"}})

    versions = [int(o["metadata"]["resourceVersion"]) for o in (first, second, updated)]
    assert versions == sorted(versions)
    assert len(set(versions)) == 3


def test_get_missing_object_is_404_with_kube_message(kube: KubeClient) -> None:
    with pytest.raises(NotFound) as raised:
        kube.get(PODS, "web-1", "default")
    assert raised.value.message == 'pods "web-1" not found'
    assert raised.value.details["name"] == "web-1"
    assert raised.value.details["kind"] == "pods"


def test_create_twice_is_409_already_exists(kube: KubeClient) -> None:
    kube.create(PODS, pod("web-1"))
    with pytest.raises(AlreadyExists) as raised:
        kube.create(PODS, pod("web-1"))
    assert raised.value.code == 409
    assert raised.value.message == 'pods "web-1" already exists'


def test_same_name_in_other_namespace_is_a_different_object(kube: KubeClient) -> None:
    kube.create(NAMESPACES, {"metadata": {"name": "team-a"}})
    kube.create(PODS, pod("web-1"))
    other = kube.create(PODS, pod("web-1", "team-a"))
    assert other["metadata"]["namespace"] == "team-a"
    assert len(kube.list(PODS).items) == 2
    assert [p["metadata"]["namespace"] for p in kube.list(PODS, "team-a").items] == ["team-a"]


def test_create_in_missing_namespace_is_404(kube: KubeClient) -> None:
    with pytest.raises(NotFound) as raised:
        kube.create(PODS, pod("web-1", "nowhere"))
    assert raised.value.message == 'namespaces "nowhere" not found'


def test_initial_namespaces_exist(kube: KubeClient) -> None:
    names = {ns["metadata"]["name"] for ns in kube.list(NAMESPACES).items}
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names
    assert kube.get(NAMESPACES, "default")["status"]["phase"] == "Active"


def test_generate_name_appends_a_random_suffix(kube: KubeClient) -> None:
    body = {"metadata": {"generateName": "worker-", "namespace": "default"}, "data": {}}
    names = {kube.create(CONFIGMAPS, body)["metadata"]["name"] for _ in range(5)}

    assert len(names) == 5
    for name in names:
        assert name.startswith("worker-")
        suffix = name.removeprefix("worker-")
        assert len(suffix) == 5
        assert set(suffix) <= set("bcdfghjklmnpqrstvwxz2456789")


@pytest.mark.parametrize(
    ("name", "reason", "fragment"),
    [
        ("", "FieldValueRequired", "name or generateName is required"),
        ("Web_1", "FieldValueInvalid", "a lowercase RFC 1123 subdomain"),
    ],
)
def test_invalid_names_are_422_with_causes(
    kube: KubeClient, name: str, reason: str, fragment: str
) -> None:
    with pytest.raises(Invalid) as raised:
        kube.create(CONFIGMAPS, {"metadata": {"name": name, "namespace": "default"}})
    error = raised.value
    assert error.code == 422
    assert error.message.startswith(f'ConfigMap "{name}" is invalid: metadata.name: ')
    assert fragment in error.message
    [cause] = error.details["causes"]
    assert cause["field"] == "metadata.name"
    assert cause["reason"] == reason


def test_namespace_names_must_be_dns_labels(kube: KubeClient) -> None:
    with pytest.raises(Invalid, match="RFC 1123 label"):
        kube.create(NAMESPACES, {"metadata": {"name": "team.a"}})


def test_body_for_another_kind_is_rejected(kube: KubeClient) -> None:
    with pytest.raises(BadRequest):
        kube.create(PODS, {**configmap("x"), "apiVersion": "apps/v1"})


def test_update_with_stale_resource_version_is_409_conflict(kube: KubeClient) -> None:
    created = kube.create(CONFIGMAPS, configmap("settings", mode="a"))
    kube.update(CONFIGMAPS, {**created, "data": {"mode": "b"}})

    with pytest.raises(Conflict) as raised:
        kube.update(CONFIGMAPS, {**created, "data": {"mode": "c"}})
    assert raised.value.message == (
        'Operation cannot be fulfilled on configmaps "settings": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert kube.get(CONFIGMAPS, "settings", "default")["data"] == {"mode": "b"}


def test_update_without_resource_version_is_unconditional_for_built_ins(
    kube: KubeClient,
) -> None:
    created = kube.create(CONFIGMAPS, configmap("settings", mode="a"))
    kube.update(CONFIGMAPS, {**created, "data": {"mode": "b"}})
    body = {**created, "metadata": {"name": "settings", "namespace": "default"}}

    replaced = kube.update(CONFIGMAPS, {**body, "data": {"mode": "c"}})

    assert replaced["data"] == {"mode": "c"}
    assert replaced["metadata"]["uid"] == created["metadata"]["uid"]
    assert replaced["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]


def test_update_of_missing_object_is_404(kube: KubeClient) -> None:
    with pytest.raises(NotFound):
        kube.update(CONFIGMAPS, configmap("ghost"))


def test_noop_update_keeps_the_resource_version(kube: KubeClient) -> None:
    created = kube.create(CONFIGMAPS, configmap("settings", mode="a"))
    again = kube.update(CONFIGMAPS, created)
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_pod_cannot_move_to_another_node(kube: KubeClient) -> None:
    bound = kube.create(PODS, pod("web-1", node="n1"))
    with pytest.raises(Invalid) as raised:
        kube.update(PODS, {**bound, "spec": {**bound["spec"], "nodeName": "n2"}})
    assert raised.value.details["causes"][0]["field"] == "spec"


def test_delete_removes_and_returns_the_object(kube: KubeClient) -> None:
    created = kube.create(CONFIGMAPS, configmap("settings", mode="a"))
    deleted = kube.delete(CONFIGMAPS, "settings", "default")
    assert deleted["metadata"]["name"] == "settings"
    assert deleted["metadata"]["uid"] == created["metadata"]["uid"]
    assert deleted["data"] == {"mode": "a"}
    assert "deletionTimestamp" not in deleted["metadata"]  # it went at once
    with pytest.raises(NotFound):
        kube.get(CONFIGMAPS, "settings", "default")
    with pytest.raises(NotFound):
        kube.delete(CONFIGMAPS, "settings", "default")


def test_unserved_resource_is_404(kube: KubeClient) -> None:
    widgets = Resource("example.com", "v1", "widgets", "Widget", True)
    with pytest.raises(NotFound):
        kube.list(widgets)


def test_served_versions(kube: KubeClient) -> None:
    assert kube.served_versions("apps") == ["v1"]
    assert kube.served_versions("") == ["v1"]
    assert kube.served_versions("example.com") == []


@pytest.mark.parametrize(
    ("labels", "fragment"),
    [
        ({"app": "has space"}, "a valid label must be an empty string"),
        ({"bad key!": "x"}, "name part must consist of alphanumeric characters"),
        ({"Example.COM/app": "x"}, "prefix part a lowercase RFC 1123 subdomain"),
        ({"app": "x" * 64}, "must be no more than 63 characters"),
    ],
)
def test_invalid_labels_are_422(kube: KubeClient, labels: dict[str, str], fragment: str) -> None:
    with pytest.raises(Invalid) as raised:
        kube.create(PODS, pod("web", labels=labels))
    assert fragment in raised.value.message
    assert raised.value.details["causes"][0]["field"] == "metadata.labels"

    created = kube.create(PODS, pod("web", labels={"example.com/app": "web_1.2-x", "empty": ""}))
    with pytest.raises(Invalid):
        kube.patch(PODS, "web", {"metadata": {"labels": labels}}, "default")
    assert kube.get(PODS, "web", "default") == created


def test_owner_reference_needs_a_uid(kube: KubeClient) -> None:
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": ""}
    with pytest.raises(Invalid, match=r"metadata.ownerReferences\[0\].uid"):
        kube.create(PODS, pod("web", owners=[ref]))
