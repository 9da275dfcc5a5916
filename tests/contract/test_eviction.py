"""Contract: the Eviction API honours PodDisruptionBudgets, whose status the server keeps."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock, format_timestamp
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.errors import InternalError, NotFound, TooManyRequests
from karpenter_capi.core.kube.resources import POD_DISRUPTION_BUDGETS, PODS, REPLICASETS
from karpenter_capi.sim.apiserver import InMemoryAPIServer

from .objects import owner_ref, pod

READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def apiserver(clock: FakeClock) -> InMemoryAPIServer:
    """The contract ``kube`` fixture's server, on a clock these tests move by hand."""
    return InMemoryAPIServer(clock)


NOT_READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}


def _replicaset(kube: KubeClient, replicas: int) -> dict[str, Any]:
    return kube.create(
        REPLICASETS,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx"}]},
                },
            },
        },
    )


def _running(
    kube: KubeClient,
    name: str,
    *,
    status: dict[str, Any] = READY,
    owner: dict[str, Any] | None = None,
) -> None:
    owners = [{**owner_ref(owner), "controller": True}] if owner else None
    kube.create(PODS, pod(name, labels={"app": "web"}, node="n1", owners=owners))
    kube.patch(PODS, name, {"status": status}, "default", subresource="status")


def _budget(kube: KubeClient, name: str = "web", **spec: Any) -> None:
    kube.create(
        POD_DISRUPTION_BUDGETS,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
        },
    )


def _status(kube: KubeClient, name: str = "web") -> dict[str, Any]:
    status: dict[str, Any] = kube.get(POD_DISRUPTION_BUDGETS, name, "default")["status"]
    return status


def _pods(kube: KubeClient) -> list[str]:
    return [p["metadata"]["name"] for p in kube.list(PODS, "default").items]


def test_eviction_without_budget_deletes_the_pod(kube: KubeClient) -> None:
    _running(kube, "web-1")
    kube.evict("web-1", "default")
    assert _pods(kube) == []


def test_eviction_of_missing_pod_is_404(kube: KubeClient) -> None:
    with pytest.raises(NotFound):
        kube.evict("ghost", "default")


def test_budget_status_follows_the_pods(kube: KubeClient) -> None:
    _running(kube, "web-1")
    _running(kube, "web-2")
    _running(kube, "web-3", status=NOT_READY)
    _budget(kube, minAvailable=1)

    status = _status(kube)
    assert status["expectedPods"] == 3
    assert status["currentHealthy"] == 2
    assert status["desiredHealthy"] == 1
    assert status["disruptionsAllowed"] == 1

    kube.patch(PODS, "web-3", {"status": READY}, "default", subresource="status")
    assert _status(kube)["disruptionsAllowed"] == 2


def test_budget_condition_records_when_its_status_changed(
    kube: KubeClient, clock: FakeClock
) -> None:
    _running(kube, "web-1")
    _budget(kube, minAvailable=1)

    def condition() -> dict[str, Any]:
        [found] = _status(kube)["conditions"]
        assert found["type"] == "DisruptionAllowed"
        return dict(found)

    blocked = condition()
    assert blocked["status"] == "False"
    assert blocked["lastTransitionTime"] == format_timestamp(clock.now())

    clock.advance(60)
    _running(kube, "web-2")  # now one disruption is allowed: the condition flips
    allowed = condition()
    assert allowed["status"] == "True"
    assert allowed["lastTransitionTime"] == format_timestamp(clock.now())

    clock.advance(60)
    _running(kube, "web-3")  # more allowed, same condition status: the time is kept
    assert _status(kube)["disruptionsAllowed"] == 2
    assert condition()["lastTransitionTime"] == allowed["lastTransitionTime"]


def test_eviction_blocked_by_budget_is_429_with_the_budget_numbers(kube: KubeClient) -> None:
    _running(kube, "web-1")
    _running(kube, "web-2")
    _budget(kube, minAvailable=2)

    with pytest.raises(TooManyRequests) as raised:
        kube.evict("web-1", "default")

    error = raised.value
    assert error.code == 429
    assert error.message == "Cannot evict pod as it would violate the pod's disruption budget."
    [cause] = error.details["causes"]
    assert cause["reason"] == "DisruptionBudget"
    assert cause["message"] == "The disruption budget web needs 2 healthy pods and has 2 currently"
    assert _pods(kube) == ["web-1", "web-2"]


def test_budget_counts_the_controller_scale_so_a_drain_stops(kube: KubeClient) -> None:
    owner = _replicaset(kube, 3)
    for i in range(3):
        _running(kube, f"web-{i}", owner=owner)
    _budget(kube, maxUnavailable=1)
    assert _status(kube)["expectedPods"] == 3
    assert _status(kube)["disruptionsAllowed"] == 1

    kube.evict("web-0", "default")

    # The ReplicaSet still wants 3: with 2 healthy pods the budget is spent.
    assert _pods(kube) == ["web-1", "web-2"]
    assert _status(kube)["disruptionsAllowed"] == 0
    with pytest.raises(TooManyRequests):
        kube.evict("web-1", "default")

    kube.patch(REPLICASETS, "web", {"spec": {"replicas": 2}}, "default")
    assert _status(kube)["disruptionsAllowed"] == 1
    kube.evict("web-1", "default")
    assert _pods(kube) == ["web-2"]


def test_max_unavailable_over_bare_pods_fails_safe(kube: KubeClient) -> None:
    _running(kube, "web-1")
    _running(kube, "web-2")
    _budget(kube, maxUnavailable=1)

    status = _status(kube)
    assert status["disruptionsAllowed"] == 0
    assert status["conditions"][0]["reason"] == "SyncFailed"
    with pytest.raises(TooManyRequests):
        kube.evict("web-1", "default")


def test_percent_min_available_rounds_up(kube: KubeClient) -> None:
    owner = _replicaset(kube, 3)
    for i in range(3):
        _running(kube, f"web-{i}", owner=owner)
    _budget(kube, minAvailable="50%")

    status = _status(kube)
    assert status["desiredHealthy"] == 2
    assert status["disruptionsAllowed"] == 1


def test_pending_pods_are_evicted_regardless_of_budget(kube: KubeClient) -> None:
    kube.create(PODS, pod("web-pending", labels={"app": "web"}))
    _budget(kube, minAvailable="100%")
    kube.evict("web-pending", "default")
    assert _pods(kube) == []


def test_unready_pod_may_go_while_the_budget_is_met(kube: KubeClient) -> None:
    _running(kube, "web-1")
    _running(kube, "web-2", status=NOT_READY)
    _budget(kube, minAvailable=1)
    assert _status(kube)["disruptionsAllowed"] == 0
    kube.evict("web-2", "default")
    assert _pods(kube) == ["web-1"]


def test_two_budgets_for_one_pod_is_500(kube: KubeClient) -> None:
    _running(kube, "web-1")
    _budget(kube, "first", minAvailable=0)
    _budget(kube, "second", minAvailable=0)
    with pytest.raises(InternalError, match="more than one PodDisruptionBudget"):
        kube.evict("web-1", "default")
