"""Which scalable resources a ClusterAPINodeClass selects, and why selected ones may go unused."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.core.values.selectors import SelectorError
from karpenter_capi.plugins.generic_capi.mirror import KindMirrors, WatchedLists
from karpenter_capi.plugins.generic_capi.selection import select, select_resources
from karpenter_capi.sim.apiserver.http import HttpFront
from tests.plugins.generic_capi.inventory_builders import MEMBER, add, new_env, scalable, sized


def _names(selected: list[tuple[Resource, dict]]) -> list[str]:  # type: ignore[type-arg]
    return sorted(f"{r.kind}/{obj['metadata']['name']}" for r, obj in selected)


def test_deployments_sets_and_pools_need_the_opt_in_label_and_a_selector_match() -> None:
    server, _, _, capi = new_env()
    pool = {**MEMBER, "example.com/pool": "general"}
    add(
        server,
        capi,
        scalable("MachineDeployment", "md", labels=pool, annotations=sized()),
        scalable("MachineSet", "ms", labels=pool, annotations=sized()),
        scalable("MachinePool", "mp", labels=pool, annotations=sized()),
        scalable("MachineDeployment", "not-opted-in", labels={"example.com/pool": "general"}),
        scalable("MachineDeployment", "other-pool", labels={**MEMBER, "example.com/pool": "gpu"}),
        # The selector reads the object's own labels, not its Machine template's.
        scalable(
            "MachineDeployment",
            "template-only",
            labels=MEMBER,
            template_labels={"example.com/pool": "general"},
        ),
    )
    selector = {"matchLabels": {"example.com/pool": "general"}}
    assert _names(select_resources(server, capi, selector)) == [
        "MachineDeployment/md",
        "MachinePool/mp",
        "MachineSet/ms",
    ]
    # An empty selector selects every opted-in resource, in every namespace.
    add(server, capi, scalable("MachineDeployment", "elsewhere", namespace="kube-system"))
    assert len(select_resources(server, capi, None)) == 6


def test_a_machine_set_owned_by_a_selected_deployment_is_left_out_silently() -> None:
    server, _, _, capi = new_env()
    add(
        server,
        capi,
        scalable("MachineDeployment", "md"),
        scalable("MachineSet", "md-abc12", owner="md"),
    )
    selection = select(server, capi, {})
    assert _names(selection.selected) == ["MachineDeployment/md"]
    assert selection.problems == []


def test_a_machine_set_opted_in_through_an_unselected_deployment_is_reported() -> None:
    server, _, _, capi = new_env()
    add(
        server,
        capi,
        scalable("MachineDeployment", "md", labels={}),
        scalable("MachineSet", "md-abc12", owner="md"),
    )
    selection = select(server, capi, {})
    assert selection.selected == []
    [problem] = selection.problems
    assert (problem.kind, problem.name, problem.reason) == (
        "MachineSet",
        "md-abc12",
        "OwnedByMachineDeployment",
    )
    assert "owned by MachineDeployment default/md, which is not selected" in problem.message


def test_paused_and_deleting_resources_are_selected_but_not_used() -> None:
    server, _, _, capi = new_env()
    add(
        server,
        capi,
        scalable("MachineDeployment", "active", annotations=sized()),
        scalable("MachineDeployment", "paused", annotations={"cluster.x-k8s.io/paused": ""}),
        scalable("MachineDeployment", "spec-paused", spec={"paused": True}),
        scalable("MachinePool", "pool-paused", annotations={"cluster.x-k8s.io/paused": "true"}),
    )
    deleting = scalable("MachineSet", "going")
    deleting["metadata"]["finalizers"] = ["example.com/hold"]
    add(server, capi, deleting)
    server.delete(capi.machine_sets, "going", "default")

    selection = select(server, capi, {})
    assert _names(selection.selected) == ["MachineDeployment/active"]
    reasons = {p.name: (p.reason, p.message) for p in selection.problems}
    assert reasons == {
        "paused": ("Paused", "paused (cluster.x-k8s.io/paused); not scaled"),
        "spec-paused": ("Paused", "paused (spec.paused); not scaled"),
        "pool-paused": ("Paused", "paused (cluster.x-k8s.io/paused); not scaled"),
        "going": ("Deleting", "being deleted; not scaled"),
    }


def test_a_kind_the_cluster_does_not_serve_selects_nothing() -> None:
    server, _, _, capi = new_env()
    add(server, capi, scalable("MachineDeployment", "md"))
    no_pools = dataclasses.replace(
        capi,
        machine_pools=Resource("cluster.x-k8s.io", "v1beta2", "nosuchpools", "MachinePool", True),
    )
    assert _names(select_resources(server, no_pools, {})) == ["MachineDeployment/md"]


def test_an_invalid_selector_is_an_error_not_an_empty_selection() -> None:
    server, _, _, capi = new_env()
    with pytest.raises(SelectorError, match="needs at least one value"):
        select(server, capi, {"matchExpressions": [{"key": "a", "operator": "In"}]})


def test_through_the_official_client_the_selection_is_read_from_watches() -> None:
    # Four lists on every launch call over a real API: mirrors list each kind once, then follow
    # its watch, and a read still shows what this process wrote (here a scale write).
    server, _, _, capi = new_env()
    add(server, capi, scalable("MachineDeployment", "md", annotations=sized()))
    with HttpFront(server, host="127.0.0.1", port=0) as front:
        official = OfficialClient.from_url(front.url)
        client = _CountingLists(official)
        lists = WatchedLists(KindMirrors(client))
        try:
            first = select(client, capi, {}, lister=lists)
            official.patch(
                capi.machine_deployments,
                "md",
                {"spec": {"replicas": 3}},
                "default",
                subresource="scale",
            )
            second = select(client, capi, {}, lister=lists)
        finally:
            lists.close()
            official.close()
    assert _names(first.selected) == _names(second.selected) == ["MachineDeployment/md"]
    assert second.selected[0][1]["spec"]["replicas"] == 3
    assert client.lists == 4  # deployments, sets, pools, clusters: once each


def test_two_selections_read_one_copy_of_each_kind_and_each_sees_only_its_own() -> None:
    # Two NodeClasses with different selectors: one list and one watch per kind, not one per
    # selector; each sees only what a list with its selector would (a relabelled resource
    # leaves one selection for the other), and this process's scale of its resource.
    server, _, _, capi = new_env()
    pool_a = {**MEMBER, "example.com/pool": "a"}
    pool_b = {**MEMBER, "example.com/pool": "b"}
    add(
        server,
        capi,
        scalable("MachineDeployment", "md-a", labels=pool_a, annotations=sized()),
        scalable("MachineDeployment", "md-b", labels=pool_b, annotations=sized()),
        scalable("MachineDeployment", "md-other", labels={"example.com/pool": "a"}),
    )
    a = {"matchLabels": {"example.com/pool": "a"}}
    b = {"matchExpressions": [{"key": "example.com/pool", "operator": "In", "values": ["b"]}]}
    with HttpFront(server, host="127.0.0.1", port=0) as front:
        official = OfficialClient.from_url(front.url)
        client = _CountingLists(official)
        lists = WatchedLists(KindMirrors(client))
        try:
            first = (select(client, capi, a, lister=lists), select(client, capi, b, lister=lists))
            official.patch(
                capi.machine_deployments,
                "md-b",
                {"spec": {"replicas": 2}},
                "default",
                subresource="scale",
            )
            official.patch(
                capi.machine_deployments,
                "md-a",
                {"metadata": {"labels": {"example.com/pool": "b"}}},
                "default",
            )
            then = (select(client, capi, a, lister=lists), select(client, capi, b, lister=lists))
        finally:
            lists.close()
            official.close()
    assert [_names(s.selected) for s in first] == [
        ["MachineDeployment/md-a"],
        ["MachineDeployment/md-b"],
    ]
    assert [_names(s.selected) for s in then] == [
        [],
        ["MachineDeployment/md-a", "MachineDeployment/md-b"],
    ]
    replicas = {obj["metadata"]["name"]: obj["spec"]["replicas"] for _, obj in then[1].selected}
    assert replicas["md-b"] == 2
    assert client.lists == 4  # deployments, sets, pools, clusters: once each for both
    assert client.watches == 4


class _CountingLists:
    """The official client, counting its lists and watches."""

    def __init__(self, inner: OfficialClient) -> None:
        self.inner = inner
        self.lists = 0
        self.watches = 0

    def watch(self, *args: Any, **kw: Any) -> Any:
        self.watches += 1
        return self.inner.watch(*args, **kw)

    def list(self, *args: Any, **kw: Any) -> Any:
        self.lists += 1
        return self.inner.list(*args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
