"""Metrics of the cloud plugins, on the operator's private registry.

The core's ``Metrics`` already has the cloud-provider call metrics
(``karpenter_cloudprovider_duration_seconds``, ``karpenter_cloudprovider_errors_total``); cloud
plugins time every cloud API call with them, labelled by API (``DescribeInstanceTypes``,
``GetProducts``). What the core does not have is the age of the prices a plugin uses, which is
how an operator notices that a pricing API has been failing for hours; that gauge is registered
kept by the operator's ``Metrics`` (``plugin_gauge``), once per registry however many
plugins share it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import Final

from prometheus_client import Gauge

from karpenter_capi.plugin_api.karpenter import Metrics

PRICING_AGE_METRIC: Final = "karpenter_capi_pricing_age_seconds"
CONTROLLER: Final = "inventory"
"""The ``controller`` label of the cloud calls: prices and catalogs feed the inventory."""


def _age_gauge(metrics: Metrics) -> Gauge:
    # capa and capz share the registry, so the gauge is the registry's, not either plugin's.
    return metrics.plugin_gauge(
        PRICING_AGE_METRIC,
        "Seconds since the prices a cloud plugin uses were fetched from the cloud.",
        ["plugin", "region"],
    )


class CloudMetrics:
    """A cloud plugin's view of the operator's metrics: API call timing and price age.

    ``provider`` (the plugin's name) labels both; the price age is per ``region`` as well,
    since a plugin keeps one price book per region it serves.
    """

    def __init__(self, metrics: Metrics, provider: str, region: str = "") -> None:
        self._metrics = metrics
        self._provider = provider
        self._region = region
        self._age = _age_gauge(metrics)

    def for_region(self, region: str) -> CloudMetrics:
        """The same metrics, with the price age reported for ``region`` (a location)."""
        return CloudMetrics(self._metrics, self._provider, region)

    @property
    def provider(self) -> str:
        return self._provider

    @contextmanager
    def call(self, api: str) -> Iterator[None]:
        """Time one cloud API call (``api``: the cloud's operation name); failures counted."""
        with self._metrics.cloudprovider_call(api, provider=self._provider, controller=CONTROLLER):
            yield

    def price_age(self, seconds: float | None) -> None:
        """Report how old the prices are; ``None`` (no prices at all) removes the series."""
        if seconds is None:
            with suppress(KeyError):  # never reported yet
                self._age.remove(self._provider, self._region)
            return
        self._age.labels(self._provider, self._region).set(max(0.0, seconds))


def timed(metrics: CloudMetrics | None, api: str) -> AbstractContextManager[None]:
    """``metrics.call(api)``, or nothing when the plugin runs without metrics."""
    return metrics.call(api) if metrics is not None else nullcontext()
