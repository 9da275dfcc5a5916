"""``benchmarks/fleet_launches.py``: a double launch is a NodeClaim created for a cluster by a
replica that did not hold the cluster's shard Lease when the create arrived."""

from __future__ import annotations

from benchmarks.fleet_launches import LeaseHistory, double_launches, identity_of
from karpenter_capi.core.fleet.sharding import ANNOTATION_CLUSTER, LABEL_SHARD, ROLE_CLUSTER
from karpenter_capi.core.kube.resources import LEASES
from karpenter_capi.sim.apiserver import InMemoryAPIServer


def _lease(key: str, holder: str) -> dict[str, object]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "shard-" + key.replace("/", "-"),
            "namespace": "kube-system",
            "labels": {LABEL_SHARD: ROLE_CLUSTER},
            "annotations": {ANNOTATION_CLUSTER: key},
        },
        "spec": {"holderIdentity": holder},
    }


def test_the_replica_is_read_from_the_user_agent() -> None:
    assert identity_of("karpenter-capi/0.1.0 (replica-1)") == "replica-1"
    assert identity_of("karpenter-capi") == ""


def test_a_create_by_anyone_but_the_holder_at_its_arrival_is_a_double_launch() -> None:
    now = [0.0]
    server = InMemoryAPIServer()
    history = LeaseHistory(server, lambda: now[0])
    now[0] = 10.0
    created = server.create(LEASES, _lease("ns/a", "replica-0"), "kube-system")
    now[0] = 12.0  # a renewal changes nothing
    server.update(LEASES, created)
    now[0] = 30.0  # taken over after the kill
    server.patch(
        LEASES,
        created["metadata"]["name"],
        {"spec": {"holderIdentity": "replica-1"}},
        "kube-system",
    )
    agent = "karpenter-capi/0.1.0 ({})".format
    creates = {
        "ns/a": [
            (5.0, agent("replica-0")),  # before anyone held it
            (11.0, agent("replica-0")),  # the holder
            (20.0, agent("replica-1")),  # its Lease still names replica-0
            (31.0, agent("replica-1")),  # the new holder
            (32.0, agent("replica-0")),  # the old one, too late
        ]
    }
    found = double_launches(creates, history)
    assert found["double_launches"] == 3
    assert [(d["at"], d["by"], d["holder"]) for d in found["examples"]] == [
        (5.0, "replica-0", ""),
        (20.0, "replica-1", "replica-0"),
        (32.0, "replica-0", "replica-1"),
    ]
    assert found["created_by_replica"] == {"replica-0": 3, "replica-1": 2}
    assert history.takeover("ns/a", "replica-0", 25.0) == {"last_renewal": -13.0, "taken": 5.0}
