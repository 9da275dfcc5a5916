"""A pod tried again before the cache shows the stand-in's own ``PodScheduled`` write is not
written again.

An unplaceable pod (no node at all) comes back on every event, another pending pod's arrival
included. Under load the scheduler's pod cache can lag a cycle behind the server: the pod it
tries again is its version from before its last failure write. kube's queue would hold the pod
as its informer delivered that write (``scheduling_queue.go: Update``) and ``updatePod`` finds
the condition unchanged and writes nothing (``podutil.UpdatePodCondition``); the stand-in must
too, not write the same condition again with a new ``lastTransitionTime``."""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube import NODES, PODS, JsonObject
from karpenter_capi.core.kube.cache import Store
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.core.runtime.controller import WORKLOAD
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.scheduler import CYCLE_KEY, SimScheduler
from karpenter_capi.sim.scheduler.cycle import Snapshot
from karpenter_capi.sim.scheduler.facts import PodFacts
from karpenter_capi.sim.scheduler.queue import NODE_RESOURCES_FIT, SchedulingQueue

NS = "default"


class _Caches:
    """Caches the test moves by hand: a lagging informer."""

    def __init__(self) -> None:
        self.stores: dict[str, Store[JsonObject]] = {}

    def store(self, resource: Resource, cluster: str = WORKLOAD) -> Store[JsonObject]:
        return self.stores.setdefault(resource.plural, Store())

    def has_synced(self) -> bool:
        return True

    def resource_version(self, resource: Resource, cluster: str = WORKLOAD) -> str:
        return ""


def _pod(name: str) -> JsonObject:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "app"}]},
    }


def _deliver(api: InMemoryAPIServer, caches: _Caches, sched: SimScheduler, name: str) -> None:
    pod = api.get(PODS, name, NS)
    caches.store(PODS).upsert(f"{NS}/{name}", pod)
    sched._on_pod(pod)


def _status_writes(api: InMemoryAPIServer) -> list[str]:
    writes: list[str] = []
    patch = api.patch

    def recording(resource: Resource, name: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("subresource") == "status":
            writes.append(name)
        return patch(resource, name, *args, **kwargs)

    api.patch = recording  # type: ignore[method-assign]
    return writes


def test_a_pod_tried_again_on_a_lagging_cache_keeps_its_condition_as_written() -> None:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    caches = _Caches()
    sched = SimScheduler(api, caches, clock)  # type: ignore[arg-type]
    writes = _status_writes(api)
    api.create(PODS, _pod("a"), NS)
    _deliver(api, caches, sched, "a")
    sched.reconcile(CYCLE_KEY)
    assert writes == ["a"]
    written = api.get(PODS, "a", NS)
    condition = written["status"]["conditions"][0]
    assert (condition["status"], condition["message"]) == ("False", "0/0 nodes are available.")

    # A second later, another pending pod arrives; the cache still has "a" as created.
    clock.advance(1.5)
    api.create(PODS, _pod("b"), NS)
    _deliver(api, caches, sched, "b")
    cached = caches.store(PODS).get(f"{NS}/a")
    assert cached is not None
    assert not (cached.get("status") or {}).get("conditions")
    sched.reconcile(CYCLE_KEY)

    assert writes == ["a", "b"]  # "a" was tried again (no plugin rejected it), not written
    assert api.get(PODS, "a", NS) == written  # same resourceVersion, same lastTransitionTime
    assert sched.cycles == 2

    # Once the cache shows the write, the pod is read from the cache again.
    _deliver(api, caches, sched, "a")
    clock.advance(1.5)
    api.create(PODS, _pod("c"), NS)
    _deliver(api, caches, sched, "c")
    sched.reconcile(CYCLE_KEY)
    assert writes == ["a", "b", "c"]
    assert api.get(PODS, "a", NS) == written


def _sized(cpu: str, version: str) -> JsonObject:
    return {
        "metadata": {"name": "p", "namespace": NS, "resourceVersion": version},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
    }


def _node(cpu: str) -> JsonObject:
    return {
        "metadata": {"name": "n", "labels": {}},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": cpu, "memory": "1Gi", "pods": "10"},
        },
    }


def test_a_pod_parked_again_is_judged_by_its_requests_as_it_is_now() -> None:
    """The queue reads a pod's requests once per stored version (a pod no hint covers is parked
    again at every cycle), and again for a new version: a resized pod is judged by its new
    requests (``isSchedulableAfterNodeChange``: a Node added that fits the pod)."""
    queue = SchedulingQueue()
    big = _sized("2", "1")
    for _ in range(2):  # parked, tried again, parked again: the same object
        queue.park(f"{NS}/p", big, frozenset({NODE_RESOURCES_FIT}), 0.0)
    assert not queue.node_changed(None, _node("1"))  # a 1-CPU Node cannot take 2 CPUs
    assert queue.parked(f"{NS}/p")
    queue.park(f"{NS}/p", _sized("500m", "2"), frozenset({NODE_RESOURCES_FIT}), 1.0)
    assert queue.node_changed(None, _node("1"))  # resized: it fits now
    assert not queue.parked(f"{NS}/p")


def test_a_snapshot_reads_each_pod_version_as_it_is() -> None:
    """A cycle's snapshot reads what it needs of a pod once per stored version and keeps it for
    the next cycle (``PodFacts``); a new version (resized, terminating) is read again."""
    facts = PodFacts()
    pod = _sized("2", "1")
    first = Snapshot([_node("4")], [(pod, "n")], facts)
    assert first.by_name["n"].requested["cpu"] == 2 * 10**9  # nano-CPUs
    facts.next_cycle()
    resized = _sized("500m", "2")
    resized["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    second = Snapshot([_node("4")], [(pod, "n"), (resized, "n")], facts)
    assert second.by_name["n"].requested["cpu"] == 25 * 10**8
    assert facts.of(pod) is not facts.of(resized)
    assert facts.of(resized).terminating
    assert not facts.of(pod).terminating


def test_a_cycle_keeps_the_last_snapshot_only_while_the_cluster_is_the_same() -> None:
    """Pods that fail again against the same cluster keep their condition, unwritten; a Node in
    the cache that no event has announced yet (the cache moves before the handlers are told)
    is a new cluster: the next cycle tests every pod it tries against it."""
    clock = FakeClock()
    api = new_cluster(clock=clock)
    caches = _Caches()
    sched = SimScheduler(api, caches, clock)  # type: ignore[arg-type]
    writes = _status_writes(api)
    for name in ("a", "b", "c"):
        api.create(PODS, _pod(name), NS)
        _deliver(api, caches, sched, name)
        sched.reconcile(CYCLE_KEY)
    assert writes == ["a", "b", "c"]  # each tried at every cycle, written once
    assert sched.cycles == 3

    node = _node("1")
    node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    caches.store(NODES).upsert("n", node)
    api.create(PODS, _pod("d"), NS)
    _deliver(api, caches, sched, "d")
    sched.reconcile(CYCLE_KEY)

    assert sorted(writes[3:]) == ["a", "b", "c", "d"]
    for name in ("a", "b", "c", "d"):
        condition = api.get(PODS, name, NS)["status"]["conditions"][0]
        assert condition["message"] == "0/1 nodes are available: 1 node(s) were not ready."
