"""Per-cluster plugin state: what ``generic_capi`` remembers belongs to one ``Plugins``.

A process serving two clusters (the fleet mode) holds two ``Plugins``; a failed launch in one
must not make the other's offerings unavailable, a new ``Plugins`` (a restart) starts from the
API alone even on the same client, and dropping a ``Plugins`` frees what its plugins kept.
"""

from __future__ import annotations

import gc
import logging
import weakref
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.discovery import CapiResources, capi_resources
from karpenter_capi.plugin_api import PluginContext, PluginEnvironment, Plugins
from karpenter_capi.plugins.generic_capi.inventory import UnavailableOfferings, collect_inventory
from karpenter_capi.plugins.generic_capi.learned import NodeOverheads
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from karpenter_capi.plugins.generic_capi.selection import resource_key
from karpenter_capi.plugins.generic_capi.sources import TemplateReader
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.plugins.generic_capi.inventory_builders import add, scalable, sized

NODECLASS: dict[str, Any] = {
    "apiVersion": wellknown.NODECLASS_API_VERSION,
    "kind": wellknown.NODECLASS_KIND,
    "metadata": {"name": "default"},
    "spec": {"scalableResourceSelector": {}},
}
MD_A = resource_key("MachineDeployment", "default", "md-a")


def _cluster(clock: FakeClock) -> tuple[InMemoryAPIServer, CapiResources]:
    server = new_cluster(clock=clock)
    capi = capi_resources(server, {})
    add(
        server,
        capi,
        scalable("MachineDeployment", "md-a", failure_domain="a", annotations=sized()),
        scalable("MachineDeployment", "md-b", failure_domain="b", annotations=sized()),
    )
    return server, capi


def _plugins(server: InMemoryAPIServer, clock: FakeClock) -> Plugins:
    return Plugins.from_objects(
        [("generic_capi", GenericCapiPlugin)],
        PluginEnvironment(
            workload=server,
            management=server,
            clock=clock,
            logger=logging.getLogger("test.generic_capi"),
        ),
    )


def _availability(ctx: PluginContext, capi: CapiResources) -> list[tuple[str | None, bool]]:
    inventory = collect_inventory(ctx, NODECLASS, capi)
    return [(o.zone, o.available) for it in inventory.instance_types for o in it.offerings]


def test_two_clusters_in_one_process_keep_their_own_unavailable_offerings() -> None:
    clock = FakeClock()
    (east, east_capi), (west, west_capi) = _cluster(clock), _cluster(clock)
    east_ctx = _plugins(east, clock).context("generic_capi")
    west_ctx = _plugins(west, clock).context("generic_capi")

    UnavailableOfferings.shared(east_ctx).mark(MD_A, "quota exceeded")

    assert _availability(east_ctx, east_capi) == [("a", False), ("b", True)]
    assert _availability(west_ctx, west_capi) == [("a", True), ("b", True)]
    assert NodeOverheads.shared(east_ctx, east_capi) is not NodeOverheads.shared(
        west_ctx, west_capi
    )
    assert TemplateReader.shared(east_ctx) is not TemplateReader.shared(west_ctx)


def test_the_plugins_of_one_cluster_share_its_state() -> None:
    clock = FakeClock()
    server, _ = _cluster(clock)
    plugins = _plugins(server, clock)
    # The launch code marks what the inventory reads: both reach the same object.
    marked = UnavailableOfferings.shared(plugins.context("generic_capi"))
    assert UnavailableOfferings.shared(plugins.context("generic_capi")) is marked
    assert plugins.cluster_state.get(UnavailableOfferings, lambda: UnavailableOfferings(clock)) is (
        marked
    )


def test_a_new_plugins_on_the_same_client_starts_from_the_api_alone() -> None:
    clock = FakeClock()
    server, capi = _cluster(clock)
    before = _plugins(server, clock).context("generic_capi")
    UnavailableOfferings.shared(before).mark(MD_A, "quota exceeded")

    restarted = _plugins(server, clock).context("generic_capi")

    assert _availability(restarted, capi) == [("a", True), ("b", True)]


def test_dropping_a_plugins_frees_what_its_plugins_kept() -> None:
    clock = FakeClock()
    server, capi = _cluster(clock)
    plugins = _plugins(server, clock)
    ctx = plugins.context("generic_capi")
    _availability(ctx, capi)
    kept = [
        weakref.ref(UnavailableOfferings.shared(ctx)),
        weakref.ref(TemplateReader.shared(ctx)),
        weakref.ref(NodeOverheads.shared(ctx, capi)),
    ]
    del plugins, ctx
    gc.collect()

    assert [ref() for ref in kept] == [None, None, None]
    assert server.list(capi.machine_deployments)  # the cluster itself lives on
