"""Every retry path of the runtime waits at least as long as a 429's ``Retry-After`` says.

The storms in ``test_api_storms`` count requests on the wire; these pin each path down alone:
a reconcile, a periodic run and the work queue itself, with the 429 raised directly or wrapped
by a plugin.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.errors import RetryableCreateError
from karpenter_capi.core.kube.errors import InternalError, TooManyRequests, retry_after
from karpenter_capi.core.kube.resources import CONFIGMAPS, Resource
from karpenter_capi.core.kube.workqueue import WorkQueue
from karpenter_capi.core.runtime.controller import WORKLOAD, Key, Result, Watch
from karpenter_capi.core.runtime.entries import ControllerEntry, PeriodicEntry
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.sim.apiserver import InMemoryAPIServer

THROTTLED = TooManyRequests("slow down", retry_after_seconds=7)


class _Throttled:
    """A controller whose reconcile and periodic run both hit a 429."""

    name = "throttled"
    primary = CONFIGMAPS
    primary_cluster = WORKLOAD
    interval = 0.5

    def __init__(self, error: Exception) -> None:
        self.error = error

    def watches(self) -> Sequence[Watch]:
        return ()

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return ()

    def reconcile(self, key: Key) -> Result:
        raise self.error

    def run_once(self) -> Result:
        raise self.error


def _wrapped() -> RetryableCreateError:
    try:
        raise THROTTLED
    except TooManyRequests as exc:
        try:
            raise RetryableCreateError(f"Cluster API request failed: {exc}") from exc
        except RetryableCreateError as wrapped:
            return wrapped


def test_retry_after_is_found_through_wrapping_errors() -> None:
    assert retry_after(THROTTLED) == 7
    assert retry_after(_wrapped()) == 7
    assert retry_after(InternalError("boom")) == 0
    assert retry_after(None) == 0


@pytest.mark.parametrize("error", [THROTTLED, _wrapped()], ids=["direct", "wrapped"])
def test_a_throttled_reconcile_is_retried_after_retry_after(error: Exception) -> None:
    clock = FakeClock()
    manager = Manager(InMemoryAPIServer(clock=clock), clock=clock)

    class Reconciler(_Throttled):
        run_once = None  # type: ignore[assignment]

    manager.add(Reconciler(error))
    entry = manager.entry("throttled")
    assert isinstance(entry, ControllerEntry)
    entry.queue.add(("default", "a"))
    key = entry.queue.pop_ready()
    assert key is not None
    manager.process(entry, key)

    assert entry.queue.next_ready_time() == pytest.approx(clock.monotonic() + 7)


def test_a_throttled_periodic_run_waits_for_retry_after() -> None:
    clock = FakeClock()
    manager = Manager(InMemoryAPIServer(clock=clock), clock=clock)

    class Periodic(_Throttled):
        reconcile = None  # type: ignore[assignment]

    manager.add(Periodic(THROTTLED))
    entry = manager.entry("throttled")
    assert isinstance(entry, PeriodicEntry)
    manager.run_periodic(entry)

    assert entry.next_run == pytest.approx(clock.monotonic() + 7)


def test_work_queue_retry_has_a_floor() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock)
    queue.add_rate_limited("a", at_least=3)
    queue.add_rate_limited("b")
    assert queue.pop_ready() is None
    clock.advance(0.01)
    assert queue.pop_ready() == "b"
    clock.advance(2.98)
    assert queue.pop_ready() is None
    clock.advance(0.02)
    assert queue.pop_ready() == "a"
