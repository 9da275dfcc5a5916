"""One NodeClaim the model refuses does not stop the providers being asked about the others.

``ask_providers`` hands the plugins every NodeClaim that may be disrupted. A NodeClaim upstream's
CRDs admitted but the model refuses (``expireAfter: 99999999999h``) used to fail the whole call,
so every NodeClaim counted as blocked and nothing in the cluster was consolidated.
"""

from __future__ import annotations

from typing import Any

import pluggy

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.disruption.refusals import ask_providers
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.sim.apiserver import InMemoryAPIServer

from .builders import nodeclaim_object

hookimpl = pluggy.HookimplMarker("karpenter_capi")


class _Blocks:
    """A plugin that blocks the NodeClaim named ``held`` and records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    @hookimpl
    def karpenter_capi_disruption_blocked(self, nodeclaims: list[Any]) -> dict[str, str]:
        self.asked = [str(c.metadata.name) for c in nodeclaims]
        return {"held": "the provider holds it"} if "held" in self.asked else {}


def test_an_invalid_nodeclaim_is_held_naming_its_field_and_the_others_are_asked() -> None:
    clock = FakeClock()
    api = InMemoryAPIServer(clock=clock)
    plugin = _Blocks()
    plugins = Plugins.from_objects(
        [("blocks", plugin)], PluginEnvironment(workload=api, management=api, clock=clock)
    )

    blocked = ask_providers(
        plugins,
        [
            nodeclaim_object("good"),
            nodeclaim_object("bad", expireAfter="99999999999h"),
            nodeclaim_object("held"),
        ],
    )

    assert plugin.asked == ["good", "held"]
    assert "good" not in blocked
    assert blocked["held"] == "the provider holds it"
    assert "spec.expireAfter" in blocked["bad"]
    assert "2562047h47m16s" in blocked["bad"]
