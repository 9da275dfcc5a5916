"""The stand-in binds as kube-scheduler's DefaultBinder does: one create on ``pods/binding`` per
pod, in which the API server sets ``spec.nodeName`` and ``PodScheduled=True`` and clears the
nomination. (It used to patch ``spec.nodeName`` and then write the condition: two writes, two
watch events for every watcher of pods, the controller's included.)"""

from __future__ import annotations

from karpenter_capi.core.kube import PODS
from tests.sim.scheduler.harness import NAMESPACE, new_sim


def test_a_bind_is_one_write_and_one_watch_event() -> None:
    sim = new_sim()
    sim.node("n1", cpu="2")
    created = [sim.pod(f"p{i}", cpu="500m") for i in range(3)]
    created.append(sim.pod("planned", cpu="500m"))
    sim.api.patch(
        PODS, "planned", {"status": {"nominatedNodeName": "n1"}}, NAMESPACE, subresource="status"
    )
    before = sim.api.requests.snapshot()
    version = sim.api.resource_version
    sim.settle()

    assert [sim.node_of(p["metadata"]["name"]) for p in created] == ["n1"] * 4
    # The scheduler's only pod writes: one binding per pod.
    writes = {
        key: count
        for key, count in sim.api.requests.since(before).items()
        if key.split("/")[0] in ("create", "update", "patch", "delete")
    }
    assert writes == {"create/binding": 4}
    events = list(sim.api.watch(PODS, NAMESPACE, resource_version=version, timeout_seconds=0))
    assert sorted(e.object["metadata"]["name"] for e in events) == [
        "p0",
        "p1",
        "p2",
        "planned",
    ]
    for event in events:
        assert event.object["spec"]["nodeName"] == "n1"
        assert "nominatedNodeName" not in event.object["status"]
        conditions = event.object["status"]["conditions"]
        assert [(c["type"], c["status"]) for c in conditions] == [("PodScheduled", "True")]
    assert sim.scheduler.bound_as_nominated == 1


def test_a_binding_refused_as_stale_is_tried_again() -> None:
    sim = new_sim()
    sim.node("n1")
    sim.node("n2")
    pod = sim.pod("web")
    assert sim.scheduler._bind(pod, "n1")
    # The cycle's copy again, as a lagging cache would offer it: the server refuses (409, the
    # resourceVersion precondition), nothing is assumed, and the stand-in asks to retry.
    assert not sim.scheduler._bind(pod, "n2")
    assert sim.scheduler._refused
    assert sim.node_of("web") == "n1"
