"""PriceBook: refresh on the injected clock, last good prices kept, ConfigMap across restarts."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.errors import Conflict
from karpenter_capi.core.kube.resources import CONFIGMAPS
from karpenter_capi.core.observability.metrics import Metrics
from karpenter_capi.plugins._cloud.metrics import PRICING_AGE_METRIC, CloudMetrics
from karpenter_capi.plugins._cloud.pricebook import (
    SNAPSHOT_KEY,
    ConfigMapPriceStore,
    PriceBook,
    PriceSnapshot,
)
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster

HOUR = 3600.0


class Cloud:
    """A fetch function whose prices and failures the test controls."""

    def __init__(self, clock: FakeClock, price: float = 0.096) -> None:
        self.clock = clock
        self.price = price
        self.failing = False
        self.calls = 0

    def __call__(self) -> PriceSnapshot:
        self.calls += 1
        if self.failing:
            raise ConnectionError("pricing.us-east-1.amazonaws.com unreachable")
        return PriceSnapshot(
            on_demand={"m5.large": self.price},
            spot={("m5.large", "us-east-1a"): round(self.price * 0.4, 4)},
            fetched_at=self.clock.now(),
        )


def book(
    clock: FakeClock,
    fetch: Callable[[], PriceSnapshot],
    *,
    refresh_seconds: float = 12 * HOUR,
    retry_seconds: float = 300.0,
    store: ConfigMapPriceStore | None = None,
    metrics: CloudMetrics | None = None,
) -> PriceBook:
    """A book that refreshes on the caller's thread (deterministic on the fake clock)."""
    return PriceBook(
        "test/us-east-1",
        fetch,
        clock,
        refresh_seconds=refresh_seconds,
        retry_seconds=retry_seconds,
        store=store,
        metrics=metrics,
        background=False,
    )


def test_snapshot_round_trips_through_json() -> None:
    clock = FakeClock()
    snapshot = Cloud(clock)()
    assert PriceSnapshot.from_json(snapshot.to_json()) == snapshot
    with pytest.raises(ValueError, match="not a version-1"):
        PriceSnapshot.from_json('{"version": 9}')
    with pytest.raises(ValueError, match="malformed"):
        PriceSnapshot.from_json("{")


def test_first_use_fetches_then_serves_from_memory_until_the_refresh_is_due() -> None:
    clock = FakeClock()
    cloud = Cloud(clock)
    prices = book(clock, cloud, refresh_seconds=12 * HOUR)
    assert prices.on_demand("m5.large") == 0.096
    assert prices.spot("m5.large", "us-east-1a") == 0.0384
    assert prices.spot("m5.large", "us-east-1b") is None
    assert prices.on_demand("m5.huge") is None
    clock.advance(11 * HOUR)
    cloud.price = 0.1
    assert prices.on_demand("m5.large") == 0.096
    assert cloud.calls == 1
    assert prices.age_seconds() == 11 * HOUR
    clock.advance(HOUR)
    assert prices.on_demand("m5.large") == 0.1
    assert cloud.calls == 2
    assert prices.age_seconds() == 0


def test_a_failing_refresh_keeps_the_last_good_prices_logs_once_and_retries_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    cloud = Cloud(clock)
    prices = book(clock, cloud, refresh_seconds=HOUR, retry_seconds=300)
    assert prices.on_demand("m5.large") == 0.096
    cloud.failing = True
    caplog.set_level(logging.DEBUG, logger="karpenter_capi.plugins._cloud.pricebook")
    for _ in range(3):
        clock.advance(HOUR)
        assert prices.on_demand("m5.large") == 0.096
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "keeping the last good prices" in warnings[0].getMessage()
    assert prices.last_error is not None
    assert "unreachable" in prices.last_error
    calls = cloud.calls
    clock.advance(299)
    prices.snapshot()
    assert cloud.calls == calls  # within the retry interval: no call
    cloud.failing, cloud.price = False, 0.11
    clock.advance(1)
    assert prices.on_demand("m5.large") == 0.11
    assert prices.last_error is None
    assert prices.age_seconds() == 0


def test_no_prices_at_all_is_none_not_zero() -> None:
    clock = FakeClock()
    cloud = Cloud(clock)
    cloud.failing = True
    prices = book(clock, cloud)
    assert prices.snapshot() is None
    assert prices.on_demand("m5.large") is None
    assert prices.age_seconds() is None


def test_the_configmap_survives_a_restart_without_cloud_access() -> None:
    clock = FakeClock()
    server = new_cluster(clock=clock)
    store = ConfigMapPriceStore(server, "kube-system", "karpenter-capi-prices-aws-us-east-1")
    cloud = Cloud(clock)
    assert book(clock, cloud, store=store).on_demand("m5.large") == 0.096
    stored = server.get(CONFIGMAPS, "karpenter-capi-prices-aws-us-east-1", "kube-system")
    assert "m5.large" in stored["data"][SNAPSHOT_KEY]

    # "Restart" a day later: a new book whose fetch fails still has the stored prices,
    # with their honest age.
    clock.advance(24 * HOUR)
    offline = Cloud(clock)
    offline.failing = True
    restarted = book(clock, offline, store=store)
    assert restarted.on_demand("m5.large") == 0.096
    assert restarted.spot("m5.large", "us-east-1a") == 0.0384
    assert restarted.age_seconds() == 24 * HOUR
    assert offline.calls == 1  # stale stored prices: it tried the cloud first


def test_fresh_stored_prices_spare_the_cloud_call() -> None:
    clock = FakeClock()
    server = new_cluster(clock=clock)
    store = ConfigMapPriceStore(server, "kube-system", "prices")
    first = Cloud(clock)
    book(clock, first, store=store).snapshot()
    clock.advance(HOUR)
    second = Cloud(clock, price=0.2)
    restarted = book(clock, second, refresh_seconds=2 * HOUR, store=store)
    assert restarted.on_demand("m5.large") == 0.096
    assert second.calls == 0
    clock.advance(HOUR)  # the stored snapshot is now 2 h old: due
    assert restarted.on_demand("m5.large") == 0.2
    loaded = store.load()
    assert loaded is not None
    assert loaded.on_demand["m5.large"] == 0.2


class RacingReplica:
    """The store's client: the in-memory API server, except that right after each of the store's
    reads of the ConfigMap (while ``races`` lasts) another replica writes it through the server,
    so the store's update carries a stale resourceVersion and the server answers Conflict."""

    def __init__(self, server: InMemoryAPIServer, races: int) -> None:
        self.server = server
        self.races = races
        self.reads = 0

    def get(self, resource: Any, name: str, namespace: str | None = None, **kwargs: Any) -> Any:
        found = self.server.get(resource, name, namespace, **kwargs)
        self.reads += 1
        if self.races > 0:
            self.races -= 1
            theirs = self.server.get(resource, name, namespace)
            theirs["data"] = {**theirs.get("data", {}), f"other-{self.reads}": "written"}
            self.server.update(resource, theirs)
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.server, name)


def test_updates_carry_the_read_resource_version_and_a_conflict_is_retried_once() -> None:
    clock = FakeClock()
    server = new_cluster(clock=clock)
    ConfigMapPriceStore(server, "kube-system", "prices").save(Cloud(clock)())
    racing = RacingReplica(server, races=1)
    ConfigMapPriceStore(racing, "kube-system", "prices").save(Cloud(clock, price=0.3)())
    assert racing.reads == 2  # the first update was refused: read again, then written
    stored = server.get(CONFIGMAPS, "prices", "kube-system")["data"]
    # Without the precondition the first write would have erased the other replica's key.
    assert stored["other-1"] == "written"
    loaded = PriceSnapshot.from_json(stored[SNAPSHOT_KEY])
    assert loaded.on_demand["m5.large"] == 0.3


def test_a_second_conflict_is_raised() -> None:
    clock = FakeClock()
    server = new_cluster(clock=clock)
    ConfigMapPriceStore(server, "kube-system", "prices").save(Cloud(clock)())
    racing = RacingReplica(server, races=2)
    with pytest.raises(Conflict):
        ConfigMapPriceStore(racing, "kube-system", "prices").save(Cloud(clock, price=0.3)())
    assert racing.reads == 2


def test_a_broken_configmap_is_ignored() -> None:
    clock = FakeClock()
    server = new_cluster(clock=clock)
    server.create(
        CONFIGMAPS,
        {"metadata": {"name": "prices", "namespace": "kube-system"}, "data": {SNAPSHOT_KEY: "{"}},
    )
    assert ConfigMapPriceStore(server, "kube-system", "prices").load() is None
    assert ConfigMapPriceStore(server, "kube-system", "absent").load() is None


class BlockingCloud(Cloud):
    """A ``Cloud`` whose fetches, once ``block`` is set, wait for ``release``."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.block = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> PriceSnapshot:
        if self.block:
            self.entered.set()
            assert self.release.wait(10), "the test never released the fetch"
        return super().__call__()


def test_background_refresh_runs_off_the_callers_path() -> None:
    clock = FakeClock()
    cloud = BlockingCloud(clock)
    prices = PriceBook("bg", cloud, clock, refresh_seconds=HOUR, background=True)
    assert prices.on_demand("m5.large") == 0.096  # the very first fetch is inline
    clock.advance(HOUR)
    cloud.price, cloud.block = 0.5, True
    try:
        # Due: starts the refresh and answers at once with the old price, while it waits.
        assert prices.on_demand("m5.large") == 0.096
        assert cloud.entered.wait(10)
        assert prices.on_demand("m5.large") == 0.096  # still waiting: no second refresh
    finally:
        cloud.release.set()
    prices.wait_for_refresh(timeout=10)
    assert prices.on_demand("m5.large") == 0.5
    assert cloud.calls == 2


def test_price_age_gauge() -> None:
    clock = FakeClock()
    metrics = Metrics(clock)
    cloud = Cloud(clock)
    prices = book(clock, cloud, metrics=CloudMetrics(metrics, "capa", "us-east-1"))
    prices.snapshot()
    clock.advance(timedelta(minutes=30))
    prices.snapshot()
    text = metrics.render().decode()
    assert f'{PRICING_AGE_METRIC}{{plugin="capa",region="us-east-1"}} 1800.0' in text
    # A second plugin on the same registry shares the gauge.
    CloudMetrics(metrics, "capz", "eastus").price_age(60)
    assert (
        f'{PRICING_AGE_METRIC}{{plugin="capz",region="eastus"}} 60.0' in metrics.render().decode()
    )
