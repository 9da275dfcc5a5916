"""Concurrent launch calls share their fresh reads, and each still sees a read that began after
it asked (``shared_read`` docstring): the NodeClaims and a resource's Machines."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube import MACHINES
from karpenter_capi.core.kube.client import ListResult
from karpenter_capi.plugins.generic_capi.binding import machine_facts
from karpenter_capi.plugins.generic_capi.mirror import Mirror
from karpenter_capi.plugins.generic_capi.shared_read import SharedRead
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.plugins.generic_capi.test_launch_mirror import machine


def _until(done: Callable[[], bool]) -> None:
    """Wait for other threads to reach a state (no time limit but the test's own)."""
    pause = threading.Event()
    while not done():
        pause.wait(0.001)


def _in_threads(calls: int, call: Callable[[], Any]) -> tuple[list[threading.Thread], list[Any]]:
    results: list[Any] = [None] * calls

    def run(index: int) -> None:
        try:
            results[index] = call()
        except Exception as error:
            results[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(calls)]
    for thread in threads:
        thread.start()
    return threads, results


def test_calls_that_wait_share_the_next_read_never_the_one_under_way() -> None:
    gate = threading.Event()
    answers = iter(["old", "new"])

    def read() -> str:
        answer = next(answers)
        if answer == "old":
            gate.wait()
        return answer

    shared = SharedRead(read)
    first, earliest = _in_threads(1, shared)
    _until(lambda: shared.reads == 1)
    late, results = _in_threads(3, shared)
    _until(lambda: shared.waiting == 3)
    gate.set()
    for thread in first + late:
        thread.join()
    early = earliest[0]
    assert early == "old"
    assert results == ["new", "new", "new"]  # they asked after "old" began
    assert shared.reads == 2


def test_a_failed_read_fails_every_call_that_waited_for_it() -> None:
    gate = threading.Event()
    outcomes = iter([None, RuntimeError("API away")])

    def read() -> str:
        outcome = next(outcomes)
        if outcome is None:
            gate.wait()
            return "ok"
        raise outcome

    shared = SharedRead(read)
    first, earliest = _in_threads(1, shared)
    _until(lambda: shared.reads == 1)
    late, results = _in_threads(2, shared)
    _until(lambda: shared.waiting == 2)
    gate.set()
    for thread in first + late:
        thread.join()
    early = earliest[0]
    assert early == "ok"
    assert [str(r) for r in results] == ["API away", "API away"]
    assert shared.reads == 2


class _SlowLists:
    """An API whose first list is answered, then held until ``gate`` opens: a list in flight
    over a real API, which cannot be drained by a zero-timeout watch."""

    drains_zero_timeout_watch = False

    def __init__(self, api: InMemoryAPIServer) -> None:
        self.api = api
        self.gate = threading.Event()
        self.lists: list[str] = []

    def list(self, resource: Any, namespace: str | None = None, **kwargs: Any) -> ListResult:
        listed = self.api.list(resource, namespace, **kwargs)
        self.lists.append(resource.plural)
        if len(self.lists) == 1:
            self.gate.wait()
        return listed


@pytest.fixture
def api() -> InMemoryAPIServer:
    return new_cluster(clock=FakeClock())


def test_mirror_reads_that_come_during_a_list_share_the_next_one(api: InMemoryAPIServer) -> None:
    api.create(MACHINES, machine("m-1", "md-a"), "default")
    client = _SlowLists(api)
    mirror = Mirror(client, MACHINES, machine_facts, namespace="default")  # type: ignore[arg-type]
    first, earliest = _in_threads(1, mirror.read)
    _until(lambda: len(client.lists) == 1)
    api.create(MACHINES, machine("m-2", "md-a"), "default")  # after the first list was made
    late, results = _in_threads(3, mirror.read)
    _until(lambda: mirror._shared.waiting == 3)
    client.gate.set()
    for thread in first + late:
        thread.join()
    early = earliest[0]
    assert [m.name for m in early] == ["m-1"]
    assert [[m.name for m in r] for r in results] == [["m-1", "m-2"]] * 3
    assert client.lists == ["machines", "machines"]  # not one list per read
    assert mirror.lists == 2
