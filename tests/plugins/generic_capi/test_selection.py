"""Which scalable resources a ClusterAPINodeClass selects, and why selected ones may go unused."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.core.values.selectors import SelectorError
from karpenter_capi.plugins.generic_capi.mirror import WatchedLists
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
        lists = WatchedLists(client)
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


def test_a_scale_write_to_a_resource_a_selection_does_not_hold_keeps_its_watch() -> None:
    # A Scale answer does not show the labels: the write concerns a copy only if the copy holds
    # the object. With watches that never deliver, a wait for it would end in a list.
    server, _, _, capi = new_env()
    pool_a = {**MEMBER, "example.com/pool": "a"}
    pool_b = {**MEMBER, "example.com/pool": "b"}
    add(
        server,
        capi,
        scalable("MachineDeployment", "md-a", labels=pool_a, annotations=sized()),
        scalable("MachineDeployment", "md-b", labels=pool_b, annotations=sized()),
    )
    selector = {"matchLabels": {"example.com/pool": "a"}}
    with HttpFront(server, host="127.0.0.1", port=0) as front:
        official = OfficialClient.from_url(front.url)
        client = _CountingLists(official, silent_watches=True)
        lists = WatchedLists(client)
        try:
            select(client, capi, selector, lister=lists)
            official.patch(
                capi.machine_deployments,
                "md-b",
                {"spec": {"replicas": 2}},
                "default",
                subresource="scale",
            )
            again = select(client, capi, selector, lister=lists)
        finally:
            lists.close()
            official.close()
    assert _names(again.selected) == ["MachineDeployment/md-a"]
    assert client.lists == 4


class _CountingLists:
    """The official client, counting its lists; with ``silent_watches`` its watches deliver
    nothing until closed (a watch-fed copy that lags as long as it likes)."""

    def __init__(self, inner: OfficialClient, *, silent_watches: bool = False) -> None:
        self.inner = inner
        self.lists = 0
        self._silent = silent_watches

    def watch(self, *args: Any, **kw: Any) -> Any:
        return _Silent() if self._silent else self.inner.watch(*args, **kw)

    def list(self, *args: Any, **kw: Any) -> Any:
        self.lists += 1
        return self.inner.list(*args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Silent:
    def __init__(self) -> None:
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[Any]:
        self._closed.wait()
        return iter(())

    def close(self) -> None:
        self._closed.set()
