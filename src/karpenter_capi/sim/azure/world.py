"""One simulated Azure subscription in eastus, and the ``capz`` plugin wired to it.

Tests and the scenario runner share it so that both exercise the same answers: a test that
counts the SKU requests or makes the prices endpoint fail reaches into ``transport`` and
``prices``; a scenario only needs ``capz_plugin()``. The provider runs without background
threads (a stepped run advances virtual time itself) and with an empty environment, so no
``AZURE_*`` variable of the user's shell leaks into a simulated run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from karpenter_capi.plugins.capz.plugin import CapzPlugin
from karpenter_capi.sim.azure.eastus import PricesEndpoint, eastus_meters, eastus_skus, skus_handler
from karpenter_capi.sim.azure.transport import (
    ANY_SUBSCRIPTION_SKUS_PATH,
    PRICES_PATH,
    SKUS_SUFFIX,
    FakeAzureTransport,
    FakeCredential,
)


@dataclass
class SimulatedAzure:
    """The transport (Resource SKUs of any subscription, Retail Prices), the prices endpoint
    and the credential handed to the plugin."""

    transport: FakeAzureTransport
    prices: PricesEndpoint
    credential: FakeCredential = field(default_factory=FakeCredential)

    @classmethod
    def eastus(cls) -> SimulatedAzure:
        prices = PricesEndpoint(eastus_meters())
        transport = FakeAzureTransport(
            {ANY_SUBSCRIPTION_SKUS_PATH: skus_handler(eastus_skus()), PRICES_PATH: prices}
        )
        return cls(transport, prices)

    def provider_options(self) -> dict[str, Any]:
        """What ``CapzPlugin(**...)`` or ``CapzProvider(...)`` needs to reach this Azure."""
        return {
            "credential": self.credential,
            "arm_transport": self.transport,
            "prices_transport": self.transport,
            "env": {},
            "background": False,
        }

    def capz_plugin(self) -> CapzPlugin:
        return CapzPlugin(**self.provider_options())

    def sku_requests(self) -> int:
        """Resource SKU requests served so far (pages included)."""
        return sum(1 for path in self.transport.paths() if path.endswith(SKUS_SUFFIX))
