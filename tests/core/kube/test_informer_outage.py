"""An informer through an outage of its API server: how often it asks, what it logs, and who
hears that the server answers again (issue 24 item 4: recover in seconds)."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.backoff import RECONNECT_MAX
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.errors import (
    STORAGE_INITIALIZING,
    ServiceUnavailable,
    TooManyRequests,
)
from karpenter_capi.core.kube.informer import Informer
from karpenter_capi.core.kube.resources import PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer

NAME = "workload/pods"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _informer(server: InMemoryAPIServer, clock: FakeClock) -> Informer[dict[str, Any]]:
    # No jitter: every wait is the backoff's full base delay.
    return Informer(cast(KubeClient, server), PODS, clock=clock, rand=lambda: 0.0, name=NAME)


def _retry_in(informer: Informer[Any], clock: FakeClock) -> float:
    retry_at = informer.next_retry_time
    assert retry_at is not None
    return retry_at - clock.monotonic()


def _fail_for(informer: Informer[Any], clock: FakeClock, failures: int) -> list[float]:
    waits = []
    for _ in range(failures):
        assert not informer.step()
        waits.append(_retry_in(informer, clock))
        clock.advance(waits[-1])
    return waits


@pytest.mark.parametrize(
    "error",
    [
        ServiceUnavailable("connection refused"),
        TooManyRequests(STORAGE_INITIALIZING),
    ],
    ids=["refused", "storage-initializing"],
)
def test_a_server_out_of_reach_is_asked_again_every_few_seconds_not_every_thirty(
    apiserver: InMemoryAPIServer, clock: FakeClock, error: Exception
) -> None:
    apiserver.faults.fail("*", "*", error, times=None)  # type: ignore[arg-type]
    informer = _informer(apiserver, clock)
    assert _fail_for(informer, clock, 6) == [1.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    assert RECONNECT_MAX == 2.0


def test_a_server_that_answers_with_throttling_still_backs_off_to_thirty_seconds(
    apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    apiserver.faults.fail("*", "*", TooManyRequests("slow down"), times=None)
    informer = _informer(apiserver, clock)
    assert _fail_for(informer, clock, 6) == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0]


def test_recovery_handlers_hear_once_that_the_server_answers_again(
    apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    informer = _informer(apiserver, clock)
    heard: list[float] = []
    informer.add_recovery_handler(lambda: heard.append(clock.monotonic()))
    while informer.step():
        pass
    assert heard == [], "the first list is not a recovery"
    rule = apiserver.faults.fail("*", "*", ServiceUnavailable("down"), times=None)
    _fail_for(informer, clock, 4)
    assert heard == []
    apiserver.faults.remove(rule)
    back = clock.monotonic()
    informer.step()
    informer.step()
    assert heard == [back]


def test_an_outage_is_one_warning_without_a_traceback_until_its_error_changes(
    apiserver: InMemoryAPIServer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="karpenter_capi")
    rule = apiserver.faults.fail("*", "*", ServiceUnavailable("refused"), times=None)
    informer = _informer(apiserver, clock)
    _fail_for(informer, clock, 5)
    apiserver.faults.remove(rule)
    apiserver.faults.fail("*", "*", TooManyRequests(STORAGE_INITIALIZING), times=None)
    _fail_for(informer, clock, 5)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        f"{NAME}: listing failed, retrying in 1.0s: ServiceUnavailable: refused",
        f"{NAME}: listing failed, retrying in 2.0s: TooManyRequests: {STORAGE_INITIALIZING}",
    ]
    assert [r for r in caplog.records if r.exc_info] == []
