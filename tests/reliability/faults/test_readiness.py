"""What ``/readyz`` says while the controller cannot work, in virtual time over HTTP.

Ready means "my caches follow the API server": not before the first sync, not once any cache
has failed to list or watch for ``unready_after`` seconds in a row (the reason, naming the cache
and its last error, is the 503's body), and ready again with the first list or watch that works.
A short blip stays under the threshold and does not flap the probe.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.observability.endpoint import ObservabilityServer
from karpenter_capi.core.observability.metrics import Metrics
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.cluster import new_cluster
from tests.support.provider import FakeProvider


class Stepped:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.api = new_cluster(clock=self.clock)
        self.front = HttpFront(self.api).start()
        self.client = OfficialClient.from_url(self.front.url, poll_watches=True)
        provider = FakeProvider(self.clock)
        options = OperatorOptions(leader_elect=False, metrics_port=None, unready_after=30.0)
        self.operator = Operator(
            self.client, self.client, provider.plugins(self.client), self.clock, options
        )
        self.driver: SteppedDriver = self.operator.stepped()

    def close(self) -> None:
        self.client.close()
        self.front.close()


@pytest.fixture
def stepped() -> Iterator[Stepped]:
    stepped = Stepped()
    try:
        yield stepped
    finally:
        stepped.close()


def test_not_ready_before_the_caches_sync(stepped: Stepped) -> None:
    ready, reason = stepped.operator.readiness()
    assert not ready
    assert reason.startswith("caches not synced yet: workload/")
    stepped.driver.run_until_quiet()
    assert stepped.operator.readiness() == (True, "")


def test_unreachable_longer_than_the_threshold_is_not_ready_until_it_is_back(
    stepped: Stepped,
) -> None:
    stepped.driver.run_until_quiet()
    stepped.front.close()

    stepped.driver.advance(20)  # a blip under the threshold: still ready
    assert stepped.operator.readiness() == (True, "")
    stepped.driver.advance(15)
    ready, reason = stepped.operator.readiness()
    assert not ready
    assert "caches cannot follow the API server" in reason
    assert "ServiceUnavailable: " in reason
    assert "cannot reach the API server" in reason

    stepped.front.start()
    stepped.driver.advance(31)  # the informers' backoff is capped at 30 s
    assert stepped.operator.readiness() == (True, "")


def test_a_throttled_api_is_not_ready_either(stepped: Stepped) -> None:
    stepped.driver.run_until_quiet()
    stepped.api.faults.storm("throttle", duration=60, retry_after_seconds=5)
    stepped.driver.advance(40)
    ready, reason = stepped.operator.readiness()
    assert not ready
    assert "TooManyRequests" in reason
    stepped.driver.advance(60)
    assert stepped.operator.readiness() == (True, "")


def test_readyz_body_carries_the_reason() -> None:
    answers = iter([(False, "caches not synced yet: workload/pods"), (True, "")])
    server = ObservabilityServer(Metrics(FakeClock()), port=0, ready=lambda: next(answers))
    with server:
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(f"{server.url}/readyz", timeout=5)
        assert failed.value.code == 503
        assert failed.value.read() == b"not ready: caches not synced yet: workload/pods\n"
        with urllib.request.urlopen(f"{server.url}/readyz", timeout=5) as response:
            assert response.read() == b"ok\n"
