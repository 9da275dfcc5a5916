"""The batch window closes early once every new pod's ReplicaSet has all its replicas.

Upstream waits a full second without a new pod before solving. When the pods that opened the
window all belong to ReplicaSets that have created every replica they ask for, nothing more is
coming from them, so ``karpenter-capi run`` solves 0.2 s after the last one instead: a
Deployment scaled to 26 replicas gets its nodes ordered 0.8 s sooner. Anything the window cannot
account for (a bare pod, a ReplicaSet still short of pods or not seen yet) keeps the full wait.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    NODECLAIMS,
    NODEPOOLS,
    PODS,
    REPLICASETS,
)
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.provisioning.batcher import Batcher
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.support import operator_world as world
from tests.support.provider import FakeProvider


def _replicaset(api: InMemoryAPIServer, name: str, replicas: int) -> dict[str, Any]:
    return api.create(
        REPLICASETS,
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "app", "image": "app"}]},
                },
            },
        },
        "default",
    )


def _owned_pods(api: InMemoryAPIServer, replicaset: dict[str, Any], count: int) -> None:
    name = replicaset["metadata"]["name"]
    for i in range(count):
        world.pending_pod(api, f"{name}-{i}")
        api.patch(
            PODS,
            f"{name}-{i}",
            {
                "metadata": {
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "ReplicaSet",
                            "name": name,
                            "uid": replicaset["metadata"]["uid"],
                            "controller": True,
                        }
                    ]
                }
            },
            "default",
        )


def _operator(complete_idle: float | None = 0.2) -> tuple[InMemoryAPIServer, Operator]:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = FakeProvider(clock, bind_after_polls=1)
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    api.create(NODEPOOLS, world.nodepool())
    options = OperatorOptions(
        leader_elect=False, metrics_port=None, wake_on_pods=True, batch_complete_idle=complete_idle
    )
    return api, Operator(api, api, provider.plugins(api), clock, options)


def test_a_complete_replicaset_is_solved_without_waiting_the_full_second() -> None:
    api, operator = _operator()
    _owned_pods(api, _replicaset(api, "web", 3), 3)
    driver = operator.stepped()
    driver.advance(0.4)
    assert api.list(NODECLAIMS).items, "the burst was complete: solved within 0.4 s"


def test_a_replicaset_still_short_of_pods_keeps_the_full_wait() -> None:
    api, operator = _operator()
    _owned_pods(api, _replicaset(api, "web", 4), 3)  # one replica still to come
    driver = operator.stepped()
    driver.advance(0.4)
    assert not api.list(NODECLAIMS).items
    driver.advance(1.0)
    assert api.list(NODECLAIMS).items, "solved once the second without a new pod is over"


def test_a_pod_no_replicaset_controls_keeps_the_full_wait() -> None:
    api, operator = _operator()
    _owned_pods(api, _replicaset(api, "web", 2), 2)
    world.pending_pod(api, "bare")  # a bare pod may be the first of many created one by one
    driver = operator.stepped()
    driver.advance(0.4)
    assert not api.list(NODECLAIMS).items
    driver.advance(1.0)
    assert api.list(NODECLAIMS).items


def test_upstream_behaviour_without_the_option() -> None:
    api, operator = _operator(complete_idle=None)
    _owned_pods(api, _replicaset(api, "web", 3), 3)
    driver = operator.stepped()
    driver.advance(0.4)
    assert not api.list(NODECLAIMS).items
    driver.advance(1.0)
    assert api.list(NODECLAIMS).items


class _Owners:
    """Pods ``<owner>-<n>`` of owners wanting ``sizes[owner]`` replicas, ``seen`` so far."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes, self.seen = sizes, dict.fromkeys(sizes, 0)

    def owner_of(self, key: str) -> str | None:
        owner = key.rsplit("-", 1)[0]
        return owner if owner in self.sizes else None

    def complete(self, owner: str) -> bool:
        return self.seen[owner] >= self.sizes[owner]


def test_an_owner_found_short_is_asked_again_at_the_next_look() -> None:
    """The caches that say whether an owner is complete can lag the pod events: the verdict is
    not kept from the pod's arrival."""
    clock = FakeClock()
    owners = _Owners({"default/a": 2})
    batcher = Batcher(clock, idle=1.0, max_duration=10.0)
    batcher.track(owners, 0.2)
    owners.seen["default/a"] = 1
    assert batcher.saw("default/a-0") == pytest.approx(1.0, abs=1e-3)
    clock.advance(0.1)
    assert batcher.saw("default/a-1") == pytest.approx(1.0, abs=1e-3)  # its count has not caught up
    owners.seen["default/a"] = 2
    assert batcher.seconds_until_ready() == pytest.approx(0.2, abs=1e-3)
    clock.advance(0.2)
    assert batcher.ready()
    batcher.reset()
    batcher.saw("default/a-2")
    batcher.trigger()  # the cluster changed under pending pods: nothing says the burst is over
    assert batcher.seconds_until_ready() == pytest.approx(1.0, abs=1e-3)


def test_the_short_wait_cannot_exceed_the_idle_wait() -> None:
    with pytest.raises(ValueError, match="complete idle"):
        Batcher(FakeClock(), idle=1.0, max_duration=10.0).track(_Owners({}), 2.0)


def test_a_complete_replicaset_is_counted_once_while_its_pods_and_replicas_stay() -> None:
    api, operator = _operator()
    replicaset = _replicaset(api, "web", 3)
    _owned_pods(api, replicaset, 3)
    driver = operator.stepped()
    driver.run_until_quiet()  # the batcher saw the three pods: the ReplicaSet was counted
    controller = operator.provisioning
    owner = f"default/web/{replicaset['metadata']['uid']}"
    store = operator.context.caches.store(PODS)
    reads = 0
    real_get = store.get

    def counted(key: str) -> Any:
        nonlocal reads
        reads += 1
        return real_get(key)

    store.get = counted  # type: ignore[method-assign]
    assert controller.complete(owner)
    assert controller.complete(owner)  # a window that sees the pods anew counts nothing again
    assert reads == 0
    api.delete(PODS, "web-0", "default", grace_period_seconds=0)
    driver.run_until_quiet()
    assert not controller.complete(owner)  # one short


def test_a_replicaset_that_completes_the_burst_asks_for_the_short_wait() -> None:
    """The ReplicaSets' cache can lag the pods' events: the window that found the owner short
    must hear of it when the ReplicaSet comes, not only at the look its full second planned."""
    api, operator = _operator()
    driver = operator.stepped()
    replicaset = _replicaset(api, "web", 4)
    _owned_pods(api, replicaset, 3)
    driver.advance(0.1)  # the pods are seen; their ReplicaSet still wants a fourth
    [owner_event] = [when for r, _, when in operator.provisioning.wake_on() if r == REPLICASETS]
    now = operator.context.clock.monotonic()
    short = owner_event(replicaset)
    assert short is not None
    assert short > now + 0.5, "short of a replica: the full idle second"
    api.patch(REPLICASETS, "web", {"spec": {"replicas": 3}}, "default")
    driver.advance(0.05)
    complete = owner_event(api.get(REPLICASETS, "web", "default"))
    assert complete is not None
    assert complete <= operator.context.clock.monotonic() + 0.2, "complete: the short wait"
    assert not api.list(NODECLAIMS).items, "no look has run since"


def test_a_pending_pods_event_parses_it_for_the_round() -> None:
    """Reading a burst's pods was a seventh of a round's CPU, spent after its window had
    closed; each new pending pod's event parses it while the window is open, and the round
    (which asks the same ``PodSpecs`` by the pod's version) finds it parsed."""
    api, operator = _operator()
    _owned_pods(api, _replicaset(api, "web", 1), 1)
    world.pending_pod(api, "bound")
    api.bind(
        {"metadata": {"name": "bound"}, "target": {"kind": "Node", "name": "node-a"}}, "default"
    )
    pending, bound = (api.get(PODS, name, "default") for name in ("web-0", "bound"))
    specs = operator.provisioning._ctx.pod_specs
    operator.provisioning._pod_event(bound)  # not provisionable: not read
    assert specs.parses == 0
    operator.provisioning._pod_event(pending)
    assert specs.parses == 1
    assert specs.get(pending).raw is pending  # the round's ask: no second parse
    assert specs.parses == 1
    # A later version of a pod the window has seen (say its nomination written) is left to
    # the round that needs it, if any.
    api.patch(PODS, "web-0", {"status": {"nominatedNodeName": "node-a"}}, "default")
    operator.provisioning._pod_event(api.get(PODS, "web-0", "default"))
    assert specs.parses == 1
