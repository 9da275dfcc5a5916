"""The threaded fleet's shard loop: each step's length is a metric
(``karpenter_fleet_shard_step_duration_seconds``), and a step comes as soon as a foreign Lease
expires when that is before the next tick.

A step lists the shard Leases and writes those it renews, takes or releases; one longer than the
retry period pushes renewals towards the renew deadline, after which the fence stops the
replica's writes. The histogram lets an operator see that coming (it was a DEBUG log)."""

from __future__ import annotations

import threading
from collections.abc import Collection

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.fleet.metrics import SHARD_STEP_DURATION, FleetMetrics
from karpenter_capi.core.fleet.shardloop import ShardLoop


class _SlowCoordinator:
    """Each step takes 0.3 s of the fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def step(self, clusters: Collection[str]) -> frozenset[str]:
        self.clock.advance(0.3)
        return frozenset(clusters)


def test_each_step_is_observed_with_its_length() -> None:
    clock = FakeClock()
    metrics = FleetMetrics(process=False)
    stepped = threading.Event()
    seen: list[float] = []

    def on_step(seconds: float) -> None:
        seen.append(seconds)
        metrics.observe_shard_step(seconds)
        stepped.set()

    loop = ShardLoop(
        _SlowCoordinator(clock),
        clock,
        2.0,
        clusters=lambda: ["ns/a"],
        on_change=lambda: None,
        on_error=lambda exc: None,
        on_step=on_step,
    ).start()
    try:
        assert stepped.wait(10)
    finally:
        clock.advance(10)
        loop.stop()
    assert abs(seen[0] - 0.3) < 1e-6
    text = metrics.render().decode()
    assert f"# TYPE {SHARD_STEP_DURATION} histogram" in text
    assert f'{SHARD_STEP_DURATION}_bucket{{le="0.35"}} ' in text
    count = next(
        line for line in text.splitlines() if line.startswith(f"{SHARD_STEP_DURATION}_count")
    )
    assert float(count.split()[-1]) >= 1
    assert f'{SHARD_STEP_DURATION}_bucket{{le="0.25"}} 0.0' in text
    assert "_created" not in text


def test_the_loop_steps_when_a_foreign_lease_expires_not_at_the_next_tick() -> None:
    clock = FakeClock()
    began = clock.monotonic()
    steps: list[float] = []
    second = threading.Event()

    class _Coordinator:
        def step(self, clusters: Collection[str]) -> frozenset[str]:
            steps.append(clock.monotonic() - began)
            if len(steps) == 2:
                second.set()
            return frozenset()

    loop = ShardLoop(
        _Coordinator(),
        clock,
        2.0,
        clusters=lambda: ["ns/a"],
        on_change=lambda: None,
        on_error=lambda exc: None,
        next_expiry=lambda: began + 0.5 if len(steps) == 1 else None,
    ).start()
    try:
        while not steps:
            threading.Event().wait(0.01)
        clock.advance(0.6)  # past the expiry, short of the retry period
        assert second.wait(10)
    finally:
        clock.advance(10)
        loop.stop()
    assert abs(steps[1] - 0.6) < 1e-6
