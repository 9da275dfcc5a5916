"""What every request pays before it is served: its count, and the fault check.

Both take a shortcut for what repeats: a request's count names are made once per kind of
request, and a server with no fault rule answers without its clock or lock. Neither may change
what is counted or injected: a rule added between two requests applies to the second, and each
kind of request is counted under its own names, however often it comes."""

from __future__ import annotations

from karpenter_capi.core.kube.errors import TooManyRequests
from karpenter_capi.core.kube.resources import PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.request_counts import WATCH_POLL, RequestCounts


def test_each_kind_of_request_is_counted_under_its_own_names_every_time() -> None:
    counts = RequestCounts()
    for _ in range(3):
        counts.record("patch", "status", resource="pods")
        counts.record("patch", resource="pods")
        counts.record("evict", "eviction", resource="pods")
        counts.record("watch", poll=True, resource="pods")
        counts.record("watch", resource="nodes")
    assert counts.snapshot() == {
        "patch/status": 3,
        "patch": 3,
        "create/eviction": 3,
        WATCH_POLL: 3,
        "watch": 3,
    }
    assert counts.by_resource() == {
        "patch pods/status": 3,
        "patch pods": 3,
        "create pods/eviction": 3,
        "watch pods": 3,
        "watch nodes": 3,
    }


def test_a_fault_added_after_requests_without_any_applies_to_the_next_one(
    apiserver: InMemoryAPIServer,
) -> None:
    apiserver.create(PODS, {"metadata": {"name": "p", "namespace": "default"}, "spec": {}})
    for _ in range(3):
        apiserver.get(PODS, "p", "default")
    apiserver.faults.throttle("get", "pods", times=1, retry_after_seconds=1)
    try:
        apiserver.get(PODS, "p", "default")
    except TooManyRequests:
        pass
    else:
        raise AssertionError("the throttle added after requests without faults was not applied")
    apiserver.get(PODS, "p", "default")  # used up: served again
    assert apiserver.faults.injected["TooManyRequests"] == 1
