"""Contract: list with label and field selectors, and paginated lists with limit/continue."""

from __future__ import annotations

import pytest

from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.errors import BadRequest, Gone
from karpenter_capi.core.kube.resources import NODES, PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer

from .objects import node, pod


def _names(
    kube: KubeClient, *, label_selector: str | None = None, field_selector: str | None = None
) -> list[str]:
    listed = kube.list(
        PODS, "default", label_selector=label_selector, field_selector=field_selector
    )
    return [p["metadata"]["name"] for p in listed.items]


@pytest.fixture
def labelled_pods(kube: KubeClient) -> KubeClient:
    kube.create(PODS, pod("a", labels={"app": "web", "tier": "front"}, node="n1"))
    kube.create(PODS, pod("b", labels={"app": "web", "tier": "back"}, node="n2"))
    kube.create(PODS, pod("c", labels={"app": "db"}, node="n1"))
    kube.create(PODS, pod("d", labels={"app": "db", "canary": "true"}))
    return kube


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["a", "b"]),
        ("app==web", ["a", "b"]),
        ("app!=web", ["c", "d"]),
        ("tier in (front,back)", ["a", "b"]),
        ("app in (db),tier notin (front)", ["c", "d"]),
        ("tier", ["a", "b"]),
        ("!tier", ["c", "d"]),
        ("app=db,!canary", ["c"]),
        ("", ["a", "b", "c", "d"]),
    ],
)
def test_label_selectors(labelled_pods: KubeClient, selector: str, expected: list[str]) -> None:
    assert _names(labelled_pods, label_selector=selector) == expected


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("spec.nodeName=n1", ["a", "c"]),
        ("spec.nodeName==n2", ["b"]),
        ("spec.nodeName!=n1", ["b", "d"]),
        ("spec.nodeName=", ["d"]),
        ("metadata.name=c", ["c"]),
        ("metadata.namespace=default,spec.nodeName=n1", ["a", "c"]),
        ("status.phase=Pending", ["a", "b", "c", "d"]),
        ("status.phase=Running", []),
    ],
)
def test_field_selectors(labelled_pods: KubeClient, selector: str, expected: list[str]) -> None:
    assert _names(labelled_pods, field_selector=selector) == expected


def test_label_and_field_selectors_combine(labelled_pods: KubeClient) -> None:
    assert _names(labelled_pods, label_selector="app=web", field_selector="spec.nodeName=n1") == [
        "a"
    ]


def test_unsupported_field_label_is_400(kube: KubeClient) -> None:
    with pytest.raises(BadRequest, match=r"field label not supported: spec\.priority"):
        kube.list(PODS, field_selector="spec.priority=1")


def test_malformed_label_selector_is_400(kube: KubeClient) -> None:
    with pytest.raises(BadRequest):
        kube.list(PODS, label_selector="app in web")


def test_node_field_selector(kube: KubeClient) -> None:
    kube.create(NODES, node("n1"))
    cordoned = kube.create(NODES, node("n2"))
    kube.update(NODES, {**cordoned, "spec": {**cordoned["spec"], "unschedulable": True}})
    names = [
        n["metadata"]["name"]
        for n in kube.list(NODES, field_selector="spec.unschedulable=true").items
    ]
    assert names == ["n2"]


def test_list_returns_the_current_resource_version(kube: KubeClient) -> None:
    created = kube.create(PODS, pod("a"))
    listed = kube.list(PODS)
    assert int(listed.resource_version) >= int(created["metadata"]["resourceVersion"])
    assert listed.continue_token is None


def test_pagination_walks_every_item_once_in_order(kube: KubeClient) -> None:
    for i in range(7):
        kube.create(PODS, pod(f"p{i}"))

    seen: list[str] = []
    first = kube.list(PODS, "default", limit=3)
    assert len(first.items) == 3
    assert first.continue_token
    assert first.remaining_item_count == 4
    page = first
    while True:
        seen.extend(p["metadata"]["name"] for p in page.items)
        if not page.continue_token:
            break
        page = kube.list(PODS, "default", limit=3, continue_token=page.continue_token)
        assert page.resource_version == first.resource_version

    assert seen == [f"p{i}" for i in range(7)]


def test_pagination_serves_a_consistent_snapshot(kube: KubeClient) -> None:
    for i in range(4):
        kube.create(PODS, pod(f"p{i}"))
    first = kube.list(PODS, "default", limit=2)
    assert first.continue_token

    # Changes after the first page are not visible in later pages of the same list.
    kube.delete(PODS, "p3", "default")
    kube.create(PODS, pod("p9"))
    rest = kube.list(PODS, "default", limit=10, continue_token=first.continue_token)

    assert [p["metadata"]["name"] for p in rest.items] == ["p2", "p3"]
    assert rest.continue_token is None


def test_pagination_with_selector_counts_matches(kube: KubeClient) -> None:
    for i in range(6):
        kube.create(PODS, pod(f"p{i}", labels={"even": str(i % 2 == 0).lower()}))
    page = kube.list(PODS, "default", label_selector="even=true", limit=2)
    assert [p["metadata"]["name"] for p in page.items] == ["p0", "p2"]
    assert page.continue_token
    rest = kube.list(
        PODS, "default", label_selector="even=true", limit=2, continue_token=page.continue_token
    )
    assert [p["metadata"]["name"] for p in rest.items] == ["p4"]


def test_expired_continue_token_is_410(kube: KubeClient, apiserver: InMemoryAPIServer) -> None:
    for i in range(3):
        kube.create(PODS, pod(f"p{i}"))
    first = kube.list(PODS, "default", limit=1)
    kube.create(PODS, pod("late"))
    apiserver.compact()

    with pytest.raises(Gone) as raised:
        kube.list(PODS, "default", limit=1, continue_token=first.continue_token)
    assert raised.value.code == 410
    assert "continue parameter is too old" in raised.value.message


def test_invalid_continue_token_is_400(kube: KubeClient) -> None:
    with pytest.raises(BadRequest):
        kube.list(PODS, limit=1, continue_token="not-a-token")
