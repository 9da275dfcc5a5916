"""Launch reads the NodeClaims and each resource's Machines through mirrors: one list, then only
the changes, yet every read as fresh as a list made at that moment (``mirror`` docstring)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube import MACHINES, NODECLAIMS, WatchEvent
from karpenter_capi.core.kube.discovery import capi_resources
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.plugins.generic_capi.binding import MachineFacts, claim_facts, machine_facts
from karpenter_capi.plugins.generic_capi.mirror import ClusterMirrors, Mirror
from karpenter_capi.plugins.generic_capi.scaling import ResourceRef
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.cluster import new_cluster
from tests.plugins.generic_capi.env import MEMBER, Env, names

INTENT = "karpenter.cluster.x-k8s.io/scalable-resource"


def claim(name: str, intent: str = "", **meta: object) -> dict[str, object]:
    annotations = {INTENT: intent} if intent else {}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "annotations": annotations, **meta},
        "spec": {
            "nodeClassRef": {
                "group": "karpenter.cluster.x-k8s.io",
                "kind": "ClusterAPINodeClass",
                "name": "default",
            },
            "requirements": [],
        },
    }


def machine(name: str, deployment: str) -> dict[str, object]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"cluster.x-k8s.io/deployment-name": deployment},
        },
        "spec": {"clusterName": "demo", "bootstrap": {"dataSecretName": "x"}},
    }


@pytest.fixture
def api() -> InMemoryAPIServer:
    return new_cluster(clock=FakeClock())


def test_a_burst_of_launches_lists_the_nodeclaims_and_the_machines_once(
    env: Env,
) -> None:
    env.deployment("md-a")
    claims = names("nc", 30)
    for name in claims:
        env.nodeclaim(name)

    env.launch_all(claims)

    assert len(env.bindings()) == 30
    assert env.replicas("md-a") == 30
    assert env.plugin_workload.lists.count(("nodeclaims", "")) == 1
    selected = [s for p, s in env.plugin_management.lists if p == "machines" and s != MEMBER]
    assert selected == ["cluster.x-k8s.io/deployment-name=md-a"]


def test_every_read_shows_what_a_list_made_now_would(api: InMemoryAPIServer) -> None:
    mirror = Mirror(api, NODECLAIMS, claim_facts)
    api.create(NODECLAIMS, claim("a"))
    assert [c.name for c in mirror.read()] == ["a"]

    api.create(NODECLAIMS, claim("c"))
    api.create(NODECLAIMS, claim("b"))
    api.patch(NODECLAIMS, "a", {"metadata": {"annotations": {INTENT: "x"}}})
    assert [c.name for c in mirror.read()] == ["a", "b", "c"]  # key order, as a list
    assert mirror.read()[0].intent == "x"

    api.delete(NODECLAIMS, "b")
    assert [c.name for c in mirror.read()] == ["a", "c"]
    assert mirror.lists == 1


def test_a_read_after_the_history_was_compacted_relists(api: InMemoryAPIServer) -> None:
    mirror = Mirror(api, NODECLAIMS, claim_facts)
    api.create(NODECLAIMS, claim("a"))
    assert [c.name for c in mirror.read()] == ["a"]
    api.create(NODECLAIMS, claim("b"))
    api.compact()

    assert [c.name for c in mirror.read()] == ["a", "b"]
    assert mirror.lists == 2


def test_the_machines_of_a_resource_follow_its_label(api: InMemoryAPIServer) -> None:
    mirrors = ClusterMirrors(api, api, capi_resources(api, {}))
    ref = ResourceRef("MachineDeployment", "default", "md-a")
    api.create(MACHINES, machine("m-1", "md-a"), "default")
    api.create(MACHINES, machine("m-2", "md-b"), "default")
    assert [m.name for m in mirrors.machines_of(ref)] == ["m-1"]

    api.create(MACHINES, machine("m-3", "md-a"), "default")
    relabel = {"metadata": {"labels": {"cluster.x-k8s.io/deployment-name": "md-b"}}}
    api.patch(MACHINES, "m-1", relabel, "default")
    assert [m.name for m in mirrors.machines_of(ref)] == ["m-3"]


def test_waiting_claims_are_grouped_by_the_resource_they_wait_on(
    api: InMemoryAPIServer,
) -> None:
    mirrors = ClusterMirrors(api, api, capi_resources(api, {}))
    md_a = ResourceRef("MachineDeployment", "default", "md-a")
    md_b = ResourceRef("MachineDeployment", "default", "md-b")
    api.create(NODECLAIMS, claim("nc-1", md_a.key))
    api.create(NODECLAIMS, claim("nc-2", md_a.key))
    api.create(NODECLAIMS, claim("nc-3", md_b.key))
    api.create(NODECLAIMS, claim("nc-4"))
    first = mirrors.waiting()
    assert [c.name for c in first.on(md_a)] == ["nc-1", "nc-2"]

    api.patch(NODECLAIMS, "nc-1", {"metadata": {"annotations": {INTENT: md_b.key}}})
    bound = {"cluster.x-k8s.io/machine": "default/m-1"}
    api.patch(NODECLAIMS, "nc-3", {"metadata": {"annotations": bound}})
    later = mirrors.waiting()

    assert [c.name for c in later.on(md_a)] == ["nc-2"]
    assert [c.name for c in later.on(md_b)] == ["nc-1"]  # nc-3 knows its Machine
    assert [c.name for c in first.on(md_a)] == ["nc-1", "nc-2"]  # a read does not change
    assert sorted(c.name for c in mirrors.claims()) == ["nc-1", "nc-2", "nc-3", "nc-4"]


class _LaggingWatches:
    """The official client, but its watches deliver nothing until closed: a watch-fed copy
    that lags behind the API server (as one may, for as long as it likes)."""

    def __init__(self, inner: OfficialClient) -> None:
        self.inner = inner
        self.write_log = inner.write_log
        self.drains_zero_timeout_watch = False
        self.lists = 0

    def list(self, *args: Any, **kw: Any) -> Any:
        self.lists += 1
        return self.inner.list(*args, **kw)

    def watch(self, *args: Any, **kw: Any) -> _Silent:
        return _Silent()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Silent:
    def __init__(self) -> None:
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[WatchEvent]:
        self._closed.wait()
        return iter(())

    def close(self) -> None:
        self._closed.set()


def _md_a_machines(client: Any, **kw: Any) -> Mirror[MachineFacts]:
    return Mirror(
        client,
        MACHINES,
        machine_facts,
        namespace="default",
        label_selector="cluster.x-k8s.io/deployment-name=md-a",
        **kw,
    )


def test_through_the_official_client_reads_show_its_own_writes_from_the_watch(
    api: InMemoryAPIServer,
) -> None:
    # A real kube-apiserver cannot drain a watch: the mirror lists once, then follows a watch,
    # and each read waits until that watch shows what this process wrote.
    api.create(MACHINES, machine("m-1", "md-a"), "default")
    with HttpFront(api, host="127.0.0.1", port=0) as front:
        client = OfficialClient.from_url(front.url)
        mirror = _md_a_machines(client)
        try:
            assert [m.name for m in mirror.read()] == ["m-1"]
            client.create(MACHINES, machine("m-2", "md-a"), "default")
            assert [m.name for m in mirror.read()] == ["m-1", "m-2"]
            client.create(MACHINES, machine("m-3", "md-b"), "default")  # not this mirror's
            relabel = {"metadata": {"labels": {"cluster.x-k8s.io/deployment-name": "md-b"}}}
            client.patch(MACHINES, "m-1", relabel, "default")
            assert [m.name for m in mirror.read()] == ["m-2"]
            client.delete(MACHINES, "m-2", "default")
            assert [m.name for m in mirror.read()] == []
        finally:
            mirror.close()
            client.close()
    assert mirror.lists == 1


def test_a_watch_that_lags_behind_this_process_writes_costs_a_list_not_a_stale_read(
    api: InMemoryAPIServer,
) -> None:
    # The safety the list on every read gave: launch binds a Machine and the next call must see
    # that bind, or it hands the Machine out again (a double launch). A copy whose watch has not
    # caught up with this process's writes is never read: the read lists instead.
    api.create(MACHINES, machine("m-1", "md-a"), "default")
    with HttpFront(api, host="127.0.0.1", port=0) as front:
        official = OfficialClient.from_url(front.url)
        client = _LaggingWatches(official)
        mirror = _md_a_machines(client, barrier_seconds=0.01)
        try:
            assert [m.name for m in mirror.read()] == ["m-1"]
            assert [m.name for m in mirror.read()] == ["m-1"]  # nothing written: no list
            claimed = {"metadata": {"labels": {"cluster.x-k8s.io/claimed": "nc-1"}}}
            client.patch(MACHINES, "m-1", claimed, "default")
            client.create(MACHINES, machine("m-2", "md-a"), "default")
            machines = mirror.read()
        finally:
            mirror.close()
            official.close()
    assert [m.name for m in machines] == ["m-1", "m-2"]
    assert client.lists == 2


def test_a_bind_this_process_wrote_is_never_counted_waiting_again_from_a_lagging_watch(
    api: InMemoryAPIServer,
) -> None:
    # Were nc-1 still counted waiting on md-a after its bind, the next launch call would raise
    # md-a's replicas for it a second time: a double launch.
    md_a = ResourceRef("MachineDeployment", "default", "md-a")
    api.create(NODECLAIMS, claim("nc-1", md_a.key))
    api.create(NODECLAIMS, claim("nc-2", md_a.key))
    with HttpFront(api, host="127.0.0.1", port=0) as front:
        official = OfficialClient.from_url(front.url)
        client = _LaggingWatches(official)
        mirrors = ClusterMirrors(client, client, capi_resources(api, {}), barrier_seconds=0.01)
        try:
            assert [c.name for c in mirrors.waiting().on(md_a)] == ["nc-1", "nc-2"]
            bound = {"cluster.x-k8s.io/machine": "default/m-1"}
            client.patch(NODECLAIMS, "nc-1", {"metadata": {"annotations": bound}})
            waiting = [c.name for c in mirrors.waiting().on(md_a)]
        finally:
            mirrors.close()
            official.close()
    assert waiting == ["nc-2"]
