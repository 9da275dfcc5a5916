"""Exponential backoff with jitter, computed against an injected clock and random source."""

from __future__ import annotations

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.backoff import Backoff


def test_delays_double_from_one_second_to_a_thirty_second_cap() -> None:
    backoff = Backoff(FakeClock(), rand=lambda: 0.0)
    assert [backoff.fail() for _ in range(8)] == [1, 2, 4, 8, 16, 30, 30, 30]


def test_jitter_shortens_each_delay_by_at_most_a_quarter() -> None:
    samples = iter([1.0, 0.5, 0.0, 1.0])
    backoff = Backoff(FakeClock(), rand=lambda: next(samples))
    assert backoff.fail() == pytest.approx(0.75)
    assert backoff.fail() == pytest.approx(1.75)
    assert backoff.fail() == pytest.approx(4.0)
    assert backoff.fail() == pytest.approx(6.0)


def test_retry_time_follows_the_clock_and_reset_forgets_failures() -> None:
    clock = FakeClock()
    backoff = Backoff(clock, rand=lambda: 0.0)
    assert backoff.ready()
    assert backoff.retry_at is None
    backoff.fail()
    backoff.fail()
    assert backoff.retry_at == pytest.approx(clock.monotonic() + 2)
    assert not backoff.ready()
    clock.advance(1.5)
    assert backoff.remaining() == pytest.approx(0.5)
    clock.advance(0.5)
    assert backoff.ready()
    backoff.reset()
    assert backoff.failures == 0
    assert backoff.fail() == 1


def test_nonsense_parameters_are_rejected() -> None:
    with pytest.raises(ValueError, match="backoff needs"):
        Backoff(FakeClock(), initial=5, cap=1)
    with pytest.raises(ValueError, match="backoff needs"):
        Backoff(FakeClock(), jitter=1.0)
