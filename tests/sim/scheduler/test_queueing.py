"""The stand-in retries an unschedulable pod when kube-scheduler's queue would, not on any event.

kube-scheduler parks a pod its plugins rejected in ``unschedulablePods`` and moves it back only
on a cluster event one of those plugins' queueing hints says could make it schedulable (a Node
that fits it, a bound pod deleted, a taint or cordon lifted), or after five minutes there. So a
nomination written after the pod's last attempt (which clears one) lasts until an event that
could help it. ``docs/scheduler-stand-in.md`` cites the code.
"""

from __future__ import annotations

import pytest

from karpenter_capi.core.kube import NODES, PERSISTENT_VOLUME_CLAIMS, PODS
from karpenter_capi.core.kube.errors import ServiceUnavailable
from tests.sim.scheduler.harness import NAMESPACE, Sim, new_sim


@pytest.fixture
def sim() -> Sim:
    return new_sim()


def _message(sim: Sim, pod: str) -> str:
    condition = sim.scheduled(pod)
    assert condition is not None
    return str(condition["message"])


def _nominated(sim: Sim, pod: str) -> str | None:
    value: str | None = (sim.get(pod).get("status") or {}).get("nominatedNodeName")
    return value


def _make_ready(sim: Sim, name: str) -> None:
    node = sim.api.get(NODES, name)
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    sim.api.update(NODES, node, subresource="status")


def test_a_nomination_to_a_booting_node_lasts_until_the_node_is_ready(sim: Sim) -> None:
    sim.node("full", cpu="1")
    sim.pod("web", cpu="2")
    sim.settle()
    sim.node("booting", ready=False)  # its registration brings the pod back: it fails there
    sim.settle()
    sim.api.patch(
        PODS, "web", {"status": {"nominatedNodeName": "booting"}}, NAMESPACE, subresource="status"
    )
    # Other pods coming and binding do not bring the pod back, so nothing clears it.
    sim.pod("other", cpu="500m")
    sim.settle()
    assert sim.node_of("other") == "full"
    assert sim.node_of("web") is None
    assert _nominated(sim, "web") == "booting"
    _make_ready(sim, "booting")
    sim.settle()
    assert sim.node_of("web") == "booting"
    assert _nominated(sim, "web") is None  # cleared by the API server with the binding


def test_a_pod_without_room_waits_for_a_node_that_fits_it(sim: Sim) -> None:
    sim.node("n1", cpu="1")
    sim.pod("big", cpu="3")
    sim.settle()
    said = "0/1 nodes are available: 1 Insufficient cpu."
    assert _message(sim, "big") == said
    # Neither another pending pod nor a Node too small for it brings the pod back.
    sim.pod("other", cpu="2")
    sim.node("n2", cpu="2")
    sim.settle()
    assert sim.node_of("other") == "n2"
    assert _message(sim, "big") == said
    sim.node("n3", cpu="4")
    sim.settle()
    assert sim.node_of("big") == "n3"


def test_a_node_whose_taint_is_lifted_brings_the_pod_back(sim: Sim) -> None:
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    sim.node("tainted", taints=[taint])
    sim.pod("web")
    sim.settle()
    assert sim.node_of("web") is None
    node = sim.api.get(NODES, "tainted")
    node["spec"]["taints"] = []
    sim.api.update(NODES, node)
    sim.settle()
    assert sim.node_of("web") == "tainted"


def test_a_cordon_lifted_brings_the_pod_back(sim: Sim) -> None:
    sim.node("cordoned", unschedulable=True)
    sim.pod("web")
    sim.settle()
    node = sim.api.get(NODES, "cordoned")
    node["spec"]["unschedulable"] = False
    sim.api.update(NODES, node)
    sim.settle()
    assert sim.node_of("web") == "cordoned"


def test_a_parked_pod_is_tried_again_after_five_minutes(sim: Sim) -> None:
    sim.node("n1", cpu="1")
    sim.pod("big", cpu="3")
    sim.settle()
    sim.node("n2", cpu="2")  # too small: no hint brings the pod back
    sim.driver.advance(299)
    assert _message(sim, "big") == "0/1 nodes are available: 1 Insufficient cpu."
    sim.driver.advance(2)  # podMaxInUnschedulablePodsDuration: 5 minutes
    assert _message(sim, "big") == "0/2 nodes are available: 2 Insufficient cpu."


def test_a_node_labelled_to_match_brings_the_pod_back(sim: Sim) -> None:
    sim.node("n1", cpu="2", labels={"pool": "a"})
    sim.pod("web", nodeSelector={"pool": "b"})
    sim.settle()
    assert sim.node_of("web") is None
    node = sim.api.get(NODES, "n1")
    node["metadata"]["labels"]["pool"] = "b"
    sim.api.update(NODES, node)
    sim.settle()
    assert sim.node_of("web") == "n1"


def test_a_pod_whose_spec_cannot_be_read_is_told_so_and_the_others_still_bind(sim: Sim) -> None:
    sim.node("n1")
    sim.pod("huge", cpu="1e400")
    sim.pod("web")
    sim.settle()
    assert sim.node_of("web") == "n1"
    assert _message(sim, "huge").startswith("cannot read the pod's spec")
    sim.pod("later")  # the stand-in keeps working for everything else
    sim.settle()
    assert sim.node_of("later") == "n1"


def test_a_bind_refused_for_a_stale_pod_is_tried_again_once_the_cache_catches_up(sim: Sim) -> None:
    """The binding of a pod the cache has an old copy of is refused (409); kube-scheduler puts
    the pod back and binds it on a later try. Here the pods' watch is down (the API server
    was away) while the pod's status moves on: the Node that fits it arrives, the bind is
    refused, and once the watch is back the status-only change it delivers is no scheduling
    event; the pod must still be bound (the two-cluster recovery test's rare failure)."""
    sim.pod("web", cpu="2")
    sim.settle()
    assert sim.node_of("web") is None
    rule = sim.api.faults.fail("watch", "pods", ServiceUnavailable("unavailable"), times=None)
    sim.driver.advance(1)
    pod = sim.get("web")
    pod["status"]["conditions"].append({"type": "Example", "status": "True"})
    sim.api.update(PODS, pod, subresource="status")
    sim.node("n1", cpu="4")
    sim.driver.advance(1)
    assert sim.node_of("web") is None  # refused: the cache's copy was stale
    sim.api.faults.remove(rule)
    sim.driver.advance(30)
    assert sim.node_of("web") == "n1"


def test_status_writes_wake_no_reconcile_and_a_deletion_still_does(sim: Sim) -> None:
    """Pod events are no work for the stand-in unless its queue would see them (its primary
    resource is Nodes): the kubelet's and its own status writes do not reconcile it, while a
    pod added or deleted does, deleted pods included (their room is free for the next)."""
    calls: list[str] = []
    reconcile = sim.scheduler.reconcile

    def counted(key: str) -> object:
        calls.append(key)
        return reconcile(key)

    sim.scheduler.reconcile = counted  # type: ignore[method-assign]
    sim.node("only", cpu="2")
    sim.pod("a-first", cpu="2")
    sim.settle()
    assert sim.node_of("a-first") == "only"
    calls.clear()
    ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    sim.api.patch(PODS, "a-first", {"status": ready}, NAMESPACE, subresource="status")
    sim.settle()
    assert calls == []
    sim.pod("b-second", cpu="2")
    sim.settle()
    assert calls  # a new pod is an event
    assert sim.node_of("b-second") is None
    calls.clear()
    sim.api.delete(PODS, "a-first", NAMESPACE, grace_period_seconds=0)
    sim.settle()
    assert calls
    assert sim.node_of("b-second") == "only"


def test_a_pod_naming_a_missing_claim_waits_for_it_at_every_attempt(sim: Sim) -> None:
    """VolumeBinding's PreFilter looks the claim up at every attempt, however often the same
    stored pod is tried (the cycle reads the rest of it once per stored version)."""
    sim.node("n1")
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    sim.pod("db", volumes=volumes)
    sim.settle()
    assert sim.node_of("db") is None
    assert 'persistentvolumeclaim "data" not found' in _message(sim, "db")
    sim.pod("other")  # an event that brings "db" back: still no claim
    sim.settle()
    assert sim.node_of("db") is None

    sim.api.create(
        PERSISTENT_VOLUME_CLAIMS,
        {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}},
        NAMESPACE,
    )
    sim.pod("third")
    sim.settle()
    assert sim.node_of("db") == "n1"
