"""The simulator's Azure: what the ``capz`` plugin talks to when a scenario says ``azure:``.

A scenario of native Azure launch (``azure-vmss``) needs the plugin's real Azure code path
(Resource SKUs through the Azure SDK, Retail Prices with their paging) without a subscription
or a network. ``transport`` serves canned answers (``eastus``) to the SDK at its HTTP
transport, and ``world.SimulatedAzure`` builds a ``CapzPlugin`` over them. The Azure SDK is
still needed (the ``azure`` extra): ``scenario_plugins`` loads ``capz`` through its entry point
first, so a missing SDK fails as enabling ``capz`` fails anywhere, with a ``PluginLoadError``
naming the extra to install. This package's ``__init__`` imports no Azure module for the same
reason.
"""

from __future__ import annotations

from collections.abc import Sequence

CAPZ = "capz"


def scenario_plugins(enabled: Sequence[str]) -> list[tuple[str, object]]:
    """``enabled`` (with ``capz`` added when missing) as ``(name, plugin)`` pairs in order,
    ``capz`` being a ``CapzPlugin`` over a fresh simulated Azure."""
    from karpenter_capi.core.plugin_host import load_plugins

    names = list(dict.fromkeys([*enabled, CAPZ]))
    loaded = dict(load_plugins(names))
    from karpenter_capi.sim.azure.world import SimulatedAzure

    azure = SimulatedAzure.eastus()
    return [(name, azure.capz_plugin() if name == CAPZ else loaded[name]) for name in names]
