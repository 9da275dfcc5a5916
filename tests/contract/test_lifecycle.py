"""Contract: finalizers, deletionTimestamp, delete preconditions and ownerReference cascades."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.kube.client import KubeClient, Preconditions, PropagationPolicy
from karpenter_capi.core.kube.errors import Conflict, Forbidden, Invalid, NotFound
from karpenter_capi.core.kube.resources import (
    CONFIGMAPS,
    MACHINE_DEPLOYMENTS,
    MACHINE_SETS,
    MACHINES,
    NAMESPACES,
    PODS,
    REPLICASETS,
)
from karpenter_capi.sim.apiserver import InMemoryAPIServer

from .objects import configmap, owner_ref, pod


def _replicaset(name: str) -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx"}]},
            },
        },
    }


def test_an_unbound_pod_is_deleted_without_a_grace_period(kube: KubeClient) -> None:
    kube.create(PODS, pod("idle", finalizers=["example.com/cleanup"]))

    returned = kube.delete(PODS, "idle", "default", grace_period_seconds=30)

    assert returned["metadata"]["deletionGracePeriodSeconds"] == 0


def _exists(kube: KubeClient, name: str) -> bool:
    try:
        kube.get(PODS, name, "default")
    except NotFound:
        return False
    return True


def test_delete_with_finalizer_marks_the_object_and_keeps_it(kube: KubeClient) -> None:
    bound = pod("web", finalizers=["example.com/cleanup"])
    bound["spec"]["nodeName"] = "node-1"  # a kubelet runs it: the grace period applies
    kube.create(PODS, bound)

    returned = kube.delete(PODS, "web", "default", grace_period_seconds=30)

    assert returned["metadata"]["deletionTimestamp"]
    assert returned["metadata"]["deletionGracePeriodSeconds"] == 30
    # As kube-apiserver: the deletion time is when the kubelet should be done, now + grace.
    created = parse_timestamp(returned["metadata"]["creationTimestamp"])
    deleting = parse_timestamp(returned["metadata"]["deletionTimestamp"])
    assert 29 <= (deleting - created).total_seconds() <= 31
    stored = kube.get(PODS, "web", "default")
    assert stored["metadata"]["deletionTimestamp"] == returned["metadata"]["deletionTimestamp"]
    assert stored["metadata"]["finalizers"] == ["example.com/cleanup"]


def test_removing_the_last_finalizer_removes_the_object(kube: KubeClient) -> None:
    kube.create(PODS, pod("web", finalizers=["example.com/a", "example.com/b"]))
    kube.delete(PODS, "web", "default")

    kube.patch(PODS, "web", {"metadata": {"finalizers": ["example.com/b"]}}, "default")
    assert _exists(kube, "web")
    kube.patch(PODS, "web", {"metadata": {"finalizers": None}}, "default")
    assert not _exists(kube, "web")


def test_new_finalizers_cannot_be_added_while_deleting(kube: KubeClient) -> None:
    kube.create(PODS, pod("web", finalizers=["example.com/a"]))
    kube.delete(PODS, "web", "default")

    with pytest.raises(Invalid) as raised:
        kube.patch(
            PODS, "web", {"metadata": {"finalizers": ["example.com/a", "example.com/b"]}}, "default"
        )
    [cause] = raised.value.details["causes"]
    assert cause["field"] == "metadata.finalizers"
    assert "no new finalizers can be added if the object is being deleted" in cause["message"]


def test_deleting_again_keeps_the_first_deletion_timestamp(kube: KubeClient) -> None:
    kube.create(PODS, pod("web", finalizers=["example.com/a"]))
    first = kube.delete(PODS, "web", "default")
    second = kube.delete(PODS, "web", "default")
    assert second["metadata"]["deletionTimestamp"] == first["metadata"]["deletionTimestamp"]


def test_delete_preconditions(kube: KubeClient) -> None:
    created = kube.create(CONFIGMAPS, configmap("settings"))
    meta = created["metadata"]

    with pytest.raises(Conflict, match="Precondition failed: UID in precondition"):
        kube.delete(CONFIGMAPS, "settings", "default", preconditions=Preconditions(uid="other"))
    with pytest.raises(Conflict, match="Precondition failed: ResourceVersion in precondition"):
        kube.delete(
            CONFIGMAPS, "settings", "default", preconditions=Preconditions(resource_version="1")
        )

    kube.delete(
        CONFIGMAPS,
        "settings",
        "default",
        preconditions=Preconditions(uid=meta["uid"], resource_version=meta["resourceVersion"]),
    )
    with pytest.raises(NotFound):
        kube.get(CONFIGMAPS, "settings", "default")


def test_background_cascade_deletes_dependents(kube: KubeClient) -> None:
    owner = kube.create(REPLICASETS, _replicaset("web"))
    kube.create(PODS, pod("web-1", owners=[owner_ref(owner)]))
    kube.create(PODS, pod("web-2", owners=[owner_ref(owner)]))
    kube.create(PODS, pod("unowned"))

    kube.delete(REPLICASETS, "web", "default")

    assert [p["metadata"]["name"] for p in kube.list(PODS, "default").items] == ["unowned"]


def test_dependent_with_a_surviving_owner_is_kept(kube: KubeClient) -> None:
    first = kube.create(REPLICASETS, _replicaset("first"))
    second = kube.create(REPLICASETS, _replicaset("second"))
    kube.create(PODS, pod("shared", owners=[owner_ref(first), owner_ref(second)]))

    kube.delete(REPLICASETS, "first", "default")
    # The collector drops the reference to the owner that is gone and keeps the pod.
    refs = kube.get(PODS, "shared", "default")["metadata"]["ownerReferences"]
    assert [r["name"] for r in refs] == ["second"]
    kube.delete(REPLICASETS, "second", "default")
    assert not _exists(kube, "shared")


def test_owner_reference_to_another_uid_does_not_cascade(kube: KubeClient) -> None:
    owner = kube.create(REPLICASETS, _replicaset("web"))
    stale = {**owner_ref(owner), "uid": "00000000-0000-0000-0000-000000000000"}
    kube.create(PODS, pod("web-1", owners=[stale]))
    kube.create(PODS, pod("web-2", owners=[owner_ref(owner)]))

    kube.delete(REPLICASETS, "web", "default")

    assert _exists(kube, "web-1")
    assert not _exists(kube, "web-2")


def test_orphan_deletion_keeps_dependents_and_drops_the_reference(kube: KubeClient) -> None:
    owner = kube.create(REPLICASETS, _replicaset("web"))
    kube.create(PODS, pod("web-1", owners=[owner_ref(owner)]))

    returned = kube.delete(
        REPLICASETS, "web", "default", propagation_policy=PropagationPolicy.ORPHAN
    )

    # As kube-apiserver answers: the owner marked with the ``orphan`` finalizer, which the
    # collector removes once the dependents are released.
    assert returned["metadata"]["deletionTimestamp"]
    assert returned["metadata"]["finalizers"] == ["orphan"]
    orphan = kube.get(PODS, "web-1", "default")
    assert "ownerReferences" not in orphan["metadata"]
    with pytest.raises(NotFound):
        kube.get(REPLICASETS, "web", "default")


def test_foreground_deletion_waits_for_blocking_dependents(kube: KubeClient) -> None:
    owner = kube.create(REPLICASETS, _replicaset("web"))
    kube.create(
        PODS, pod("web-1", owners=[owner_ref(owner, block=True)], finalizers=["example.com/x"])
    )

    kube.delete(REPLICASETS, "web", "default", propagation_policy=PropagationPolicy.FOREGROUND)

    waiting = kube.get(REPLICASETS, "web", "default")
    assert waiting["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in waiting["metadata"]["finalizers"]
    assert kube.get(PODS, "web-1", "default")["metadata"]["deletionTimestamp"]

    kube.patch(PODS, "web-1", {"metadata": {"finalizers": None}}, "default")

    assert not _exists(kube, "web-1")
    with pytest.raises(NotFound):
        kube.get(REPLICASETS, "web", "default")


def _capi(kind: str, name: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if owner is not None:
        metadata["ownerReferences"] = [{**owner_ref(owner, block=True), "controller": True}]
    spec: dict[str, Any] = {"clusterName": "sim"}
    if kind != "Machine":
        # CAPI's webhooks require the template's clusterName to match the object's, and a
        # bootstrap.
        spec["template"] = {
            "spec": {"clusterName": "sim", "bootstrap": {"dataSecretName": f"{name}-bootstrap"}}
        }
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": kind,
        "metadata": metadata,
        "spec": spec,
    }


def test_foreground_deletion_waits_for_the_whole_blocking_subtree(
    kube: KubeClient, apiserver: InMemoryAPIServer
) -> None:
    apiserver.register_cluster_api()
    deployment = kube.create(MACHINE_DEPLOYMENTS, _capi("MachineDeployment", "md"))
    machine_set = kube.create(MACHINE_SETS, _capi("MachineSet", "ms", deployment))
    machine = _capi("Machine", "m", machine_set)
    machine["metadata"]["finalizers"] = ["machine.cluster.x-k8s.io"]
    kube.create(MACHINES, machine)

    returned = kube.delete(
        MACHINE_DEPLOYMENTS, "md", "default", propagation_policy=PropagationPolicy.FOREGROUND
    )

    assert returned["metadata"]["deletionTimestamp"]
    assert returned["metadata"]["finalizers"] == ["foregroundDeletion"]
    # The MachineSet is deleted in the foreground too, so both owners wait for the Machine.
    for resource, name in ((MACHINE_DEPLOYMENTS, "md"), (MACHINE_SETS, "ms")):
        waiting = kube.get(resource, name, "default")["metadata"]
        assert waiting["deletionTimestamp"]
        assert waiting["finalizers"] == ["foregroundDeletion"]
    draining = kube.get(MACHINES, "m", "default")["metadata"]
    assert draining["deletionTimestamp"]
    assert draining["finalizers"] == ["machine.cluster.x-k8s.io"]

    kube.patch(MACHINES, "m", {"metadata": {"finalizers": None}}, "default")

    for resource, name in ((MACHINES, "m"), (MACHINE_SETS, "ms"), (MACHINE_DEPLOYMENTS, "md")):
        with pytest.raises(NotFound):
            kube.get(resource, name, "default")


def test_foreground_deletion_keeps_a_dependent_with_another_owner(kube: KubeClient) -> None:
    going = kube.create(REPLICASETS, _replicaset("going"))
    staying = kube.create(REPLICASETS, _replicaset("staying"))
    shared = [owner_ref(going, block=True), owner_ref(staying)]
    kube.create(PODS, pod("shared", owners=shared))

    kube.delete(REPLICASETS, "going", "default", propagation_policy=PropagationPolicy.FOREGROUND)

    with pytest.raises(NotFound):
        kube.get(REPLICASETS, "going", "default")
    refs = kube.get(PODS, "shared", "default")["metadata"]["ownerReferences"]
    assert [r["name"] for r in refs] == ["staying"]


def test_foreground_deletion_without_dependents_answers_the_marked_object(
    kube: KubeClient,
) -> None:
    kube.create(REPLICASETS, _replicaset("web"))

    returned = kube.delete(
        REPLICASETS, "web", "default", propagation_policy=PropagationPolicy.FOREGROUND
    )

    # What kube-apiserver answers; its collector then removes the finalizer, as here at once.
    assert returned["metadata"]["deletionTimestamp"]
    assert returned["metadata"]["finalizers"] == ["foregroundDeletion"]
    with pytest.raises(NotFound):
        kube.get(REPLICASETS, "web", "default")


def test_deleting_a_namespace_deletes_its_content(kube: KubeClient) -> None:
    kube.create(NAMESPACES, {"metadata": {"name": "team-a"}})
    kube.create(PODS, pod("web", "team-a"))
    kube.create(CONFIGMAPS, configmap("settings", "team-a"))
    kube.create(PODS, pod("stays"))

    kube.delete(NAMESPACES, "team-a")

    with pytest.raises(NotFound):
        kube.get(NAMESPACES, "team-a")
    assert kube.list(PODS, "team-a").items == []
    assert kube.list(CONFIGMAPS, "team-a").items == []
    assert _exists(kube, "stays")


def test_terminating_namespace_refuses_new_content(kube: KubeClient) -> None:
    kube.create(NAMESPACES, {"metadata": {"name": "team-a"}})
    kube.create(PODS, pod("stuck", "team-a", finalizers=["example.com/x"]))

    kube.delete(NAMESPACES, "team-a")

    assert kube.get(NAMESPACES, "team-a")["status"]["phase"] == "Terminating"
    with pytest.raises(Forbidden, match="because it is being terminated"):
        kube.create(PODS, pod("new", "team-a"))
    kube.patch(PODS, "stuck", {"metadata": {"finalizers": None}}, "team-a")
    with pytest.raises(NotFound):
        kube.get(NAMESPACES, "team-a")


@pytest.mark.parametrize("name", ["default", "kube-system", "kube-public"])
def test_system_namespaces_cannot_be_deleted(kube: KubeClient, name: str) -> None:
    with pytest.raises(Forbidden, match="this namespace may not be deleted"):
        kube.delete(NAMESPACES, name)
    assert kube.get(NAMESPACES, name)["status"]["phase"] == "Active"
