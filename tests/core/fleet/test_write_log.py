"""A fleet member's clients keep the official client's write log, so its Cluster API reads
follow a watch as single-cluster mode's do, instead of listing on every read.

``generic_capi``'s ``WatchedLists`` (launch, inventory) lists once and then follows a watch,
reading its own writes through the client's ``write_log``; a client without one gets a list on
every read, O(N) a call and O(N^2) for a burst. Fleet mode wraps each member's clients
(``ScopedClient`` confining the management cluster to the Cluster, ``FencedClient`` fencing
writes on the shard Lease): the wrappers must hand the log on, and the scoped one only its
Cluster's namespace's writes, or one Cluster's reads would wait on another's writes.
Real HTTP to the in-memory API server; requests counted at its front.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.fleet import ScopedClient
from karpenter_capi.core.fleet.fencing import FencedClient
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import MACHINE_DEPLOYMENTS, NAMESPACES
from karpenter_capi.core.values.selectors import compile_selector
from karpenter_capi.plugins.generic_capi.mirror import KindMirrors, WatchedLists
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront

SELECTOR = compile_selector({"matchLabels": {"pool": "a"}}, nil_matches=True)


def _md(name: str, namespace: str) -> dict[str, object]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"pool": "a", "cluster.x-k8s.io/cluster-name": _cluster(namespace)},
        },
        "spec": {
            "clusterName": _cluster(namespace),
            "replicas": 0,
            "selector": {"matchLabels": {"md": name}},
            "template": {
                "metadata": {"labels": {"md": name}},
                "spec": {
                    "clusterName": _cluster(namespace),
                    "bootstrap": {"dataSecretName": "x"},
                    "infrastructureRef": {
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                        "kind": "DockerMachineTemplate",
                        "name": name,
                    },
                },
            },
        },
    }


def _cluster(namespace: str) -> str:
    return namespace.removeprefix("team-")


@pytest.fixture
def front() -> Iterator[HttpFront]:
    server = InMemoryAPIServer(clock=SystemClock())
    server.register_cluster_api()
    for namespace in ("team-a", "team-b"):
        server.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
    with HttpFront(server, record_requests=True) as http:
        yield http


def _lists(front: HttpFront) -> int:
    return sum(
        1
        for r in front.requests
        if r.method == "GET" and r.path.endswith("/machinedeployments") and "watch" not in r.query
    )


def test_a_members_cluster_api_reads_list_once_then_follow_a_watch(front: HttpFront) -> None:
    official = OfficialClient.from_url(front.url)
    management = FencedClient(ScopedClient(official, "team-a", "a"), lambda: True, "team-a/a")
    lists = WatchedLists(KindMirrors(management))
    try:
        assert lists(MACHINE_DEPLOYMENTS, SELECTOR) == []
        management.create(MACHINE_DEPLOYMENTS, _md("md-1", "team-a"), "team-a")
        # Its own write shows on the next read, without a list.
        names = [md["metadata"]["name"] for md in lists(MACHINE_DEPLOYMENTS, SELECTOR)]
        assert names == ["md-1"]
        assert _lists(front) == 1
    finally:
        lists.close()
        official.close()


def test_another_clusters_writes_do_not_hold_up_a_members_reads(front: HttpFront) -> None:
    official = OfficialClient.from_url(front.url)
    scoped = ScopedClient(official, "team-a", "a")
    log = scoped.write_log
    assert log is not None
    cursor = log.end(MACHINE_DEPLOYMENTS)
    # The same management client writes for another Cluster, then for this one.
    official.create(MACHINE_DEPLOYMENTS, copy.deepcopy(_md("other", "team-b")), "team-b")
    scoped.create(MACHINE_DEPLOYMENTS, _md("mine", "team-a"), "team-a")
    writes, _ = log.since(MACHINE_DEPLOYMENTS, cursor)
    assert writes is not None
    assert [w.key for w in writes] == ["team-a/mine"]
    official.close()
