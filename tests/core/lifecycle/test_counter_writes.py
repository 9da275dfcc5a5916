"""The NodePool counter writes a NodePool's status once per change, not once per look.

Its informer copy shows its own write only when the watch event arrives; a NodeClaim or Node
event in between (a round's NodeClaims register together) reconciles the NodePool again from
the copy that does not show it yet. The status computed is the same, and writing it again was a
request for nothing (two of every NodePool status write in a 1,000-pod scale-up).
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.kube.resources import NODECLAIMS, NODEPOOLS
from karpenter_capi.core.lifecycle import NodePoolCounterController
from karpenter_capi.core.lifecycle.counter import WRITE_INTERVAL
from karpenter_capi.core.runtime.controller import WORKLOAD
from tests.core.lifecycle.harness import Env


def _count_status_writes(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    writes: list[Any] = []
    patch = env.api.patch

    def counted(resource: Any, name: str, body: Any, *args: Any, **kwargs: Any) -> Any:
        if resource == NODEPOOLS and kwargs.get("subresource") == "status":
            writes.append(body)
        return patch(resource, name, body, *args, **kwargs)

    monkeypatch.setattr(env.api, "patch", counted)
    return writes


def _launched(env: Env, name: str, cpu: str) -> None:
    env.nodeclaim(name)
    env.api.patch(
        NODECLAIMS,
        name,
        {"status": {"capacity": {"cpu": cpu, "memory": "4Gi", "pods": "110"}}},
        subresource="status",
    )


@pytest.fixture
def counted(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> tuple[NodePoolCounterController, list[Any]]:
    """The counter, one NodeClaim of 2 CPUs launched and synced, and the status writes from
    here on."""
    counter = NodePoolCounterController(env.ctx)
    _launched(env, "general-a", "2")
    env.caches.sync()
    return counter, _count_status_writes(env, monkeypatch)


def test_the_same_status_is_not_written_again_before_the_copy_shows_it(
    env: Env, counted: tuple[NodePoolCounterController, list[Any]]
) -> None:
    counter, writes = counted
    counter.reconcile("general")
    # Another NodeClaim event before the NodePool's own watch event: the copy is stale.
    counter.reconcile("general")
    assert len(writes) == 1
    env.caches.sync()
    counter.reconcile("general")  # the copy shows it: nothing to write
    assert len(writes) == 1
    status = env.api.get(NODEPOOLS, "general")["status"]
    assert status["nodes"] == 1
    assert status["resources"]["cpu"] == "2"


def test_a_changed_status_is_written_even_before_the_copy_shows_the_last(
    env: Env, counted: tuple[NodePoolCounterController, list[Any]]
) -> None:
    counter, writes = counted
    counter.reconcile("general")
    _launched(env, "general-b", "4")
    # The NodeClaims' copy moves on, the NodePool's does not (its own write not seen yet).
    env.caches._drain(env.caches._informers[(NODECLAIMS, WORKLOAD)])
    assert "status" not in env.caches.store(NODEPOOLS).get("general")
    env.clock.advance(WRITE_INTERVAL)
    counter.reconcile("general")
    assert len(writes) == 2
    status = env.api.get(NODEPOOLS, "general")["status"]
    assert status["nodes"] == 2
    assert status["resources"]["cpu"] == "6"


def test_changes_within_the_interval_go_in_one_write_at_its_end(
    env: Env, counted: tuple[NodePoolCounterController, list[Any]]
) -> None:
    """Upstream's counter writes a NodePool at most once per 5 s (it polls, and watches no
    NodeClaim); ours writes the first change at once, and what follows at the interval's end."""
    counter, writes = counted
    assert counter.reconcile("general").requeue_after is None
    env.clock.advance(1.0)
    _launched(env, "general-b", "4")
    env.caches.sync()
    assert counter.reconcile("general").requeue_after == WRITE_INTERVAL - 1.0
    env.clock.advance(1.0)
    _launched(env, "general-c", "8")
    env.caches.sync()
    assert counter.reconcile("general").requeue_after == WRITE_INTERVAL - 2.0
    assert len(writes) == 1
    env.clock.advance(WRITE_INTERVAL - 2.0)
    assert counter.reconcile("general").requeue_after is None
    assert len(writes) == 2
    status = env.api.get(NODEPOOLS, "general")["status"]
    assert (status["nodes"], status["resources"]["cpu"]) == (3, "14")
