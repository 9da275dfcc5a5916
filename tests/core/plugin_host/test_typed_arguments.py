"""A plugin written against the documented types receives exactly those types.

docs/plugins.md promises that ``nodeclaim`` is a ``NodeClaim``, ``nodepool`` a ``NodePool`` and
``nodeclass`` a ``NodeClass`` (the ``ClusterAPINodeClass`` model for that kind), all frozen.
A probe plugin, annotated with those types from ``plugin_api`` alone, rides along with
``generic_capi`` through a simulated drift (launches, disruption, deletions) and records what
every hook call handed it.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from pydantic import ValidationError

from karpenter_capi.plugin_api import (
    ClusterAPINodeClass,
    InstanceType,
    LaunchResult,
    NodeClaim,
    NodeClass,
    NodePool,
    PluginContext,
    hookimpl,
)
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import load_scenario


class TypedProbe:
    """Answers nothing (``None``: ask the next plugin); records the types it is given."""

    def __init__(self, ctx: PluginContext) -> None:
        self.ctx = ctx
        self.seen: dict[str, set[type]] = defaultdict(set)
        self.frozen: list[bool] = []

    def _saw(self, hook: str, *values: object) -> None:
        for value in values:
            self.seen[hook].add(type(value))

    @hookimpl(tryfirst=True)
    def karpenter_capi_instance_types(
        self, nodeclass: NodeClass, nodepool: NodePool
    ) -> list[InstanceType] | None:
        self._saw("instance_types", nodeclass, nodepool)
        return None

    @hookimpl(tryfirst=True)
    def karpenter_capi_create(
        self, nodeclaim: NodeClaim, instance_types: list[InstanceType], nodeclass: NodeClass
    ) -> LaunchResult | None:
        self._saw("create", nodeclaim, nodeclass)
        try:
            nodeclaim.metadata.name = "renamed"  # type: ignore[misc]
        except ValidationError:
            self.frozen.append(True)
        else:
            self.frozen.append(False)
        return None

    @hookimpl(tryfirst=True)
    def karpenter_capi_delete(self, nodeclaim: NodeClaim) -> bool | None:
        self._saw("delete", nodeclaim)
        return None

    @hookimpl(tryfirst=True)
    def karpenter_capi_disruption_blocked(self, nodeclaims: list[NodeClaim]) -> None:
        self._saw("disruption_blocked", *nodeclaims)


@pytest.fixture(scope="module")
def probe() -> TypedProbe:
    made: list[TypedProbe] = []

    def typed_probe(ctx: PluginContext) -> TypedProbe:
        made.append(TypedProbe(ctx))
        return made[-1]

    run(
        load_scenario("drift"),
        until=600,
        plugin_objects=[("typed_probe", typed_probe), ("generic_capi", GenericCapiPlugin)],
    )
    return made[-1]


def test_the_hooks_about_nodeclaims_get_the_documented_models(probe: TypedProbe) -> None:
    assert dict(probe.seen) == {
        "instance_types": {ClusterAPINodeClass, NodePool},
        "create": {NodeClaim, ClusterAPINodeClass},
        "delete": {NodeClaim},
        "disruption_blocked": {NodeClaim},
    }


def test_the_models_a_plugin_gets_are_frozen(probe: TypedProbe) -> None:
    assert probe.frozen
    assert all(probe.frozen)
