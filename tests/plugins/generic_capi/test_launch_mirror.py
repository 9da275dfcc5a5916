"""Launch reads the NodeClaims and each resource's Machines through mirrors: one list, then only
the changes, yet every read as fresh as a list made at that moment (``mirror`` docstring)."""

from __future__ import annotations

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube import MACHINES, NODECLAIMS
from karpenter_capi.core.kube.discovery import capi_resources
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.plugins.generic_capi.binding import claim_facts, machine_facts
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


def test_through_the_official_client_every_read_lists(api: InMemoryAPIServer) -> None:
    # Its watch cannot be drained without waiting a second: the mirror closes the stream and
    # lists, as the plugin did before it had mirrors.
    api.create(MACHINES, machine("m-1", "md-a"), "default")
    with HttpFront(api, host="127.0.0.1", port=0) as front:
        client = OfficialClient.from_url(front.url)
        try:
            mirror = Mirror(
                client,
                MACHINES,
                machine_facts,
                namespace="default",
                label_selector="cluster.x-k8s.io/deployment-name=md-a",
            )
            assert [m.name for m in mirror.read()] == ["m-1"]
            api.create(MACHINES, machine("m-2", "md-a"), "default")
            assert [m.name for m in mirror.read()] == ["m-1", "m-2"]
            assert [m.name for m in mirror.read()] == ["m-1", "m-2"]
        finally:
            client.close()
    assert mirror.lists == 3
