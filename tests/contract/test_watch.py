"""Contract: watch replay from a resourceVersion, 410 on expired history, bookmarks, selectors.

Streams are read with ``take`` (a fixed number of events, then close), so no test waits on a
clock; ``timeout_seconds`` is only a safety net against a hung transport.
"""

from __future__ import annotations

from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.resources import CONFIGMAPS, MACHINE_DEPLOYMENTS, NODES, PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer

from .objects import configmap, node, pod, summary, take

SAFETY_TIMEOUT = 10


def test_watch_without_version_starts_with_current_objects(kube: KubeClient) -> None:
    kube.create(PODS, pod("a"))
    kube.create(PODS, pod("b"))
    stream = kube.watch(PODS, "default", timeout_seconds=SAFETY_TIMEOUT)
    kube.create(PODS, pod("c"))

    assert summary(take(stream, 3)) == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]


def test_watch_replays_changes_after_a_resource_version(kube: KubeClient) -> None:
    kube.create(PODS, pod("before"))
    start = kube.list(PODS).resource_version
    kube.create(PODS, pod("a"))
    kube.patch(PODS, "a", {"metadata": {"labels": {"x": "1"}}}, "default")
    kube.delete(PODS, "a", "default")

    events = take(kube.watch(PODS, resource_version=start, timeout_seconds=SAFETY_TIMEOUT), 3)

    assert summary(events) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    versions = [int(e.resource_version) for e in events]
    assert versions == sorted(versions)
    assert versions[0] > int(start)
    assert events[1].object["metadata"]["labels"] == {"x": "1"}


def test_watch_is_scoped_to_its_resource_and_namespace(kube: KubeClient) -> None:
    kube.create(NODES, node("n1"))
    start = kube.list(PODS).resource_version
    kube.create(CONFIGMAPS, configmap("noise"))
    kube.create(PODS, pod("elsewhere", "kube-system"))
    kube.create(PODS, pod("here"))

    events = take(
        kube.watch(PODS, "default", resource_version=start, timeout_seconds=SAFETY_TIMEOUT), 1
    )
    assert summary(events) == [("ADDED", "here")]


def test_expired_resource_version_ends_the_watch_with_410(
    kube: KubeClient, apiserver: InMemoryAPIServer
) -> None:
    apiserver.set_watch_history(2)
    start = kube.list(PODS).resource_version
    for i in range(5):
        kube.create(PODS, pod(f"p{i}"))

    events = take(kube.watch(PODS, resource_version=start, timeout_seconds=SAFETY_TIMEOUT), 5)

    assert [e.type for e in events] == ["ERROR"]
    status = events[0].object
    assert status["kind"] == "Status"
    assert status["code"] == 410
    assert status["reason"] == "Expired"
    assert status["message"].startswith(f"too old resource version: {start} (")


def test_compaction_expires_old_versions_but_not_the_current_one(
    kube: KubeClient, apiserver: InMemoryAPIServer
) -> None:
    old = kube.list(PODS).resource_version
    kube.create(PODS, pod("a"))
    current = kube.list(PODS).resource_version
    apiserver.compact()
    kube.create(PODS, pod("b"))

    expired = take(kube.watch(PODS, resource_version=old, timeout_seconds=SAFETY_TIMEOUT), 1)
    resumed = take(kube.watch(PODS, resource_version=current, timeout_seconds=SAFETY_TIMEOUT), 1)

    assert expired[0].type == "ERROR"
    assert summary(resumed) == [("ADDED", "b")]


def test_label_selector_watch_turns_membership_changes_into_added_and_deleted(
    kube: KubeClient,
) -> None:
    kube.create(PODS, pod("a", labels={"app": "db"}))
    start = kube.list(PODS).resource_version
    kube.patch(PODS, "a", {"metadata": {"labels": {"app": "web"}}}, "default")
    kube.patch(PODS, "a", {"metadata": {"labels": {"tier": "x"}}}, "default")
    kube.patch(PODS, "a", {"metadata": {"labels": {"app": "db"}}}, "default")
    kube.create(PODS, pod("other", labels={"app": "db"}))
    kube.create(PODS, pod("b", labels={"app": "web"}))

    events = take(
        kube.watch(
            PODS, label_selector="app=web", resource_version=start, timeout_seconds=SAFETY_TIMEOUT
        ),
        4,
    )

    assert summary(events) == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
        ("ADDED", "b"),
    ]
    left = events[2]
    # The object that left the selection is shown as it last matched, at the new version.
    assert left.object["metadata"]["labels"]["app"] == "web"
    assert int(left.resource_version) > int(events[1].resource_version)


def test_field_selector_watch(kube: KubeClient) -> None:
    start = kube.list(PODS).resource_version
    kube.create(PODS, pod("a", node="n1"))
    kube.create(PODS, pod("b", node="n2"))

    events = take(
        kube.watch(
            PODS,
            field_selector="spec.nodeName=n2",
            resource_version=start,
            timeout_seconds=SAFETY_TIMEOUT,
        ),
        1,
    )
    assert summary(events) == [("ADDED", "b")]


def test_bookmark_at_timeout_carries_the_current_version(kube: KubeClient) -> None:
    start = kube.list(PODS).resource_version
    kube.create(CONFIGMAPS, configmap("moves-the-version"))
    current = kube.list(CONFIGMAPS).resource_version

    events = take(
        kube.watch(PODS, resource_version=start, allow_bookmarks=True, timeout_seconds=1), 1
    )

    [bookmark] = events
    assert bookmark.type == "BOOKMARK"
    assert bookmark.object["kind"] == "Pod"
    assert bookmark.resource_version == current


def test_watch_custom_resources_at_the_requested_version(
    kube: KubeClient, apiserver: InMemoryAPIServer
) -> None:
    apiserver.register_cluster_api()
    start = kube.list(MACHINE_DEPLOYMENTS).resource_version
    kube.create(
        MACHINE_DEPLOYMENTS,
        {
            "metadata": {"name": "pool-a", "namespace": "default"},
            # As CAPI's webhooks admit it: a bootstrap (an empty selector is defaulted).
            "spec": {"replicas": 1, "template": {"spec": {"bootstrap": {"dataSecretName": "b"}}}},
        },
    )

    old_version = MACHINE_DEPLOYMENTS.with_version("v1beta1")
    events = take(
        kube.watch(old_version, resource_version=start, timeout_seconds=SAFETY_TIMEOUT), 1
    )

    assert events[0].object["apiVersion"] == "cluster.x-k8s.io/v1beta1"


def test_watch_from_version_zero_starts_with_current_objects(kube: KubeClient) -> None:
    kube.create(PODS, pod("a"))
    events = take(kube.watch(PODS, resource_version="0", timeout_seconds=SAFETY_TIMEOUT), 1)
    assert summary(events) == [("ADDED", "a")]
    assert (
        events[0].resource_version == kube.get(PODS, "a", "default")["metadata"]["resourceVersion"]
    )
