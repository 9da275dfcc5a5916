"""The stepped driver: virtual time, timers, retries, periodic runs, leadership, hot loops.

Everything here is deterministic: a ``FakeClock`` moves only through ``advance``, and each
assertion about *when* something ran reads the clock time the controller saw.
"""

from __future__ import annotations

import pytest

from karpenter_capi.core.clock import FakeClock, SystemClock
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import CONFIGMAPS, NODES
from karpenter_capi.core.runtime.controller import DONE, WORKLOAD, Key, Result
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import NotQuietError, SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.core.runtime.toys import Failing, Scripted, Ticker, configmap


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api(clock: FakeClock) -> InMemoryAPIServer:
    return new_cluster(clock=clock)


def driver_for(api: KubeClient, clock: FakeClock, *controllers: object) -> SteppedDriver:
    manager = Manager(api, clock=clock, rand=lambda: 0.0)
    manager.add(*controllers)  # type: ignore[arg-type]
    return SteppedDriver(manager)


def test_requeue_after_runs_the_key_again_exactly_when_asked(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    api.create(CONFIGMAPS, configmap("app", {}), "default")
    controller = Scripted(clock, behaviour=lambda key, n: Result(requeue_after=60))
    driver = driver_for(api, clock, controller)
    start = clock.monotonic()

    driver.run_until_quiet()
    assert controller.times() == [start]

    driver.advance(59)
    assert len(controller.calls) == 1  # not yet

    driver.advance(1)
    assert controller.times() == [start, start + 60]

    driver.advance(120)
    assert controller.times() == [start, start + 60, start + 120, start + 180]


def test_exceptions_are_retried_with_exponential_backoff_then_forgotten(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    def fail_three_times(key: Key, call: int) -> Result:
        if call <= 3 or call == 5:
            raise Failing(f"call {call}")
        return DONE

    api.create(CONFIGMAPS, configmap("app", {}), "default")
    controller = Scripted(clock, behaviour=fail_three_times)
    driver = driver_for(api, clock, controller)
    start = clock.monotonic()

    driver.advance(1)
    offsets = [round(at - start, 6) for at in controller.times()]
    # client-go's per-item backoff: 5 ms, doubling; success resets it.
    assert offsets == [0.0, 0.005, 0.015, 0.035]
    assert driver.manager.queue("scripted").num_requeues("default/app") == 0

    # The next failure starts from the base delay again.
    api.patch(CONFIGMAPS, "app", {"data": {"k": "v"}}, "default")
    driver.advance(1)
    later = [round(at - start, 6) for at in controller.times()[4:]]
    assert later == [1.0, 1.005]
    assert driver.manager.errors_total == 4


def test_requeue_after_zero_asks_again_through_the_rate_limiter(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    api.create(CONFIGMAPS, configmap("app", {}), "default")
    controller = Scripted(
        clock, behaviour=lambda key, n: Result(requeue_after=0) if n < 3 else DONE
    )
    driver = driver_for(api, clock, controller)
    start = clock.monotonic()
    driver.advance(1)
    assert [round(at - start, 6) for at in controller.times()] == [0.0, 0.005, 0.015]


def test_periodic_controller_runs_at_start_then_every_interval(clock: FakeClock) -> None:
    api = InMemoryAPIServer(clock=clock)
    ticker = Ticker(clock, interval=30)
    driver = driver_for(api, clock, ticker)
    start = clock.monotonic()

    driver.run_until_quiet()
    assert ticker.runs == [start]
    driver.advance(29.5)
    assert ticker.runs == [start]
    driver.advance(0.5)
    assert ticker.runs == [start, start + 30]
    driver.advance(60)
    assert ticker.runs == [start + 30 * n for n in range(4)]


def test_periodic_result_overrides_the_interval_and_failures_back_off(clock: FakeClock) -> None:
    def behaviour(run: int) -> Result:
        if run == 1:
            return Result(requeue_after=5)
        if run in (2, 3):
            raise Failing("provisioning round failed")
        return DONE

    api = InMemoryAPIServer(clock=clock)
    ticker = Ticker(clock, interval=10, behaviour=behaviour)
    driver = driver_for(api, clock, ticker)
    start = clock.monotonic()
    driver.advance(20)
    # 0, then +5 (asked), fails -> +1, fails -> +2, then the interval again.
    assert [at - start for at in ticker.runs] == [0, 5, 6, 8, 18]
    assert driver.manager.errors_total == 2


def test_advance_stops_at_each_timer_so_reconciles_see_their_scheduled_time(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    for name, delay in (("a", 7.25), ("b", 3.5)):
        api.create(CONFIGMAPS, configmap(name, {"delay": str(delay)}), "default")

    def behaviour(key: Key, call: int) -> Result:
        stored = api.get(CONFIGMAPS, key.split("/")[1], "default")
        return Result(requeue_after=float(stored["data"]["delay"]))

    controller = Scripted(clock, behaviour=behaviour)
    driver = driver_for(api, clock, controller)
    start = clock.monotonic()
    driver.advance(10)
    seen = [(key, round(at - start, 6)) for key, at in controller.calls]
    assert seen == [
        ("default/a", 0.0),
        ("default/b", 0.0),
        ("default/b", 3.5),
        ("default/b", 7.0),
        ("default/a", 7.25),
    ]
    assert round(clock.monotonic() - start, 6) == 10


def test_a_controller_waits_for_its_caches_and_the_informer_retry_is_a_timer(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    api.create(CONFIGMAPS, configmap("app", {}), "default")
    api.faults.internal_error("list", "nodes")  # the first list of nodes fails
    needs_nodes = Scripted(clock, name="needs-nodes", read=[(NODES, WORKLOAD)])
    independent = Scripted(clock, name="independent")
    driver = driver_for(api, clock, needs_nodes, independent)
    start = clock.monotonic()

    driver.run_until_quiet()
    assert needs_nodes.calls == []  # its node cache has not synced yet
    assert independent.times() == [start]
    assert not driver.manager.has_synced()

    driver.advance(5)  # the informer retries after 1 s (no jitter here), then the work runs
    assert needs_nodes.times() == [start + 1]
    assert driver.manager.has_synced()


def test_follower_queues_work_and_runs_it_on_becoming_leader(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    leading = False
    controller = Scripted(clock)
    ticker = Ticker(clock, interval=10)
    manager = Manager(api, clock=clock)
    manager.add(controller, ticker)
    driver = SteppedDriver(manager, is_leader=lambda: leading)

    api.create(CONFIGMAPS, configmap("app", {}), "default")
    driver.advance(30)
    assert controller.calls == []
    assert ticker.runs == []
    assert manager.queue("scripted").depth == 1  # the cache is warm, the key waits

    leading = True
    driver.run_until_quiet()
    assert [key for key, _ in controller.calls] == ["default/app"]
    assert len(ticker.runs) == 1

    leading = False
    api.create(CONFIGMAPS, configmap("other", {}), "default")
    driver.advance(30)
    assert len(controller.calls) == 1
    assert len(ticker.runs) == 1


def test_a_controller_that_keeps_rewriting_its_object_is_reported_as_a_hot_loop(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    def bump(key: Key, call: int) -> Result:
        api.patch(CONFIGMAPS, "app", {"data": {"n": str(call)}}, "default")
        return DONE

    api.create(CONFIGMAPS, configmap("app", {}), "default")
    driver = driver_for(api, clock, Scripted(clock, behaviour=bump))
    with pytest.raises(NotQuietError, match="scripted="):
        driver.run_until_quiet(max_iterations=50)


def test_stepped_driver_refuses_a_real_clock() -> None:
    manager = Manager(InMemoryAPIServer(), clock=SystemClock())
    with pytest.raises(TypeError, match="FakeClock"):
        SteppedDriver(manager)


def test_resync_redelivers_cached_objects_as_timers(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    api.create(CONFIGMAPS, configmap("app", {}), "default")
    controller = Scripted(clock)
    manager = Manager(api, clock=clock, resync_period=300)
    manager.add(controller)
    driver = SteppedDriver(manager)
    start = clock.monotonic()
    driver.advance(600)
    assert controller.times() == [start, start + 300, start + 600]


def test_keys_can_be_enqueued_by_hand(api: InMemoryAPIServer, clock: FakeClock) -> None:
    controller = Scripted(clock)
    driver = driver_for(api, clock, controller)
    driver.run_until_quiet()
    driver.manager.enqueue("scripted", "default/missing")
    assert driver.run_until_quiet() == 1
    assert [key for key, _ in controller.calls] == ["default/missing"]


def test_a_deleted_objects_pending_requeue_is_dropped_not_held_until_it_fires(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    # An expiry-like controller: every live object is looked at again in five hours. Objects
    # come and go all day; the timers of those gone must not pile up until they fire.
    def behaviour(key: Key, call: int) -> Result:
        namespace, name = key.split("/")
        try:
            api.get(CONFIGMAPS, name, namespace)
        except NotFound:
            return DONE
        return Result(requeue_after=5 * 3600)

    controller = Scripted(clock, behaviour=behaviour)
    driver = driver_for(api, clock, controller)
    queue = driver.manager.queue("scripted")
    for n in range(50):
        api.create(CONFIGMAPS, configmap(f"cm-{n}", {}), "default")
        driver.advance(60)
        api.delete(CONFIGMAPS, f"cm-{n}", "default")
        driver.advance(60)
    api.create(CONFIGMAPS, configmap("alive", {}), "default")
    driver.run_until_quiet()
    assert queue.waiting() == 1  # only the live object's timer
    reconciles = len(controller.calls)
    driver.advance(5 * 3600)
    # The live object is looked at again on time; nothing wakes for the 50 deleted ones.
    assert [key for key, _ in controller.calls[reconciles:]] == ["default/alive"]
