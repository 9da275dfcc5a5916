"""Work held by an outage of the API server: retried within seconds, resumed the moment the
server answers again, and logged as one line (issue 24 item 4)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.errors import ServiceUnavailable
from karpenter_capi.core.kube.resources import CONFIGMAPS, NODES
from karpenter_capi.core.runtime.controller import DONE, WORKLOAD, Key, Result
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.core.runtime.toys import Scripted, Ticker, configmap


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api(clock: FakeClock) -> InMemoryAPIServer:
    return new_cluster(clock=clock)


def _down_while(down: list[bool]) -> Callable[[Key, int], Result]:
    def behaviour(key: Key, n: int) -> Result:
        if down[0]:
            raise ServiceUnavailable("the API server is unavailable")
        return DONE

    return behaviour


def test_a_reconcile_failing_on_an_outage_retries_every_5s_and_at_once_when_it_ends(
    api: InMemoryAPIServer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="karpenter_capi")
    api.create(CONFIGMAPS, configmap("app", {}), "default")
    down = [True]
    controller = Scripted(clock, behaviour=_down_while(down), read=[(NODES, WORKLOAD)])
    manager = Manager(api, clock=clock, rand=lambda: 0.0)
    manager.add(controller)
    driver = SteppedDriver(manager)
    start = clock.monotonic()
    driver.run_until_quiet()
    driver.advance(60)

    gaps = [b - a for a, b in zip(controller.times(), controller.times()[1:], strict=False)]
    assert max(gaps) <= 5.0  # the work queue's per-key backoff would be at 80 s by now
    # The API goes too: the informer of nodes fails; when it answers again, the key runs.
    rule = api.faults.fail("*", "*", ServiceUnavailable("down"), times=None)
    driver.advance(3)
    calls = len(controller.calls)
    api.faults.remove(rule)
    down[0] = False
    back = clock.monotonic()
    driver.advance(2.5)  # the informer asks again within RECONNECT_MAX (2 s)
    assert len(controller.calls) > calls
    assert min(t for t in controller.times() if t >= back) - back <= 2.0
    assert clock.monotonic() - start > 60
    failures = [r for r in caplog.records if "reconcile of default/app failed" in r.getMessage()]
    assert [r.levelno for r in failures][:2] == [logging.WARNING, logging.DEBUG]
    assert [r for r in caplog.records if r.exc_info] == []


def test_a_periodic_controller_failing_on_an_outage_runs_again_when_it_ends(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    down = [True]

    def behaviour(n: int) -> Result:
        if down[0]:
            raise ServiceUnavailable("the API server is unavailable")
        return DONE

    ticker = Ticker(clock, interval=60, behaviour=behaviour, read=[(NODES, WORKLOAD)])
    manager = Manager(api, clock=clock, rand=lambda: 0.0)
    manager.add(ticker)
    driver = SteppedDriver(manager)
    driver.run_until_quiet()
    driver.advance(30)
    gaps = [b - a for a, b in zip(ticker.runs, ticker.runs[1:], strict=False)]
    assert max(gaps) <= 5.0  # not the 60 s interval the backoff would reach

    rule = api.faults.fail("*", "*", ServiceUnavailable("down"), times=None)
    driver.advance(3)
    api.faults.remove(rule)
    down[0] = False
    back = clock.monotonic()
    runs = len(ticker.runs)
    driver.advance(2.5)
    assert len(ticker.runs) > runs
    assert min(t for t in ticker.runs if t >= back) - back <= 2.0
