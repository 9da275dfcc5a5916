"""The demo cluster (``sim.demo``'s manifests, its pods pending) and a provisioner over it.

Provisioning tests start from it, then add or join what they look at.
"""

from __future__ import annotations

import logging
from pathlib import Path

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.provisioning.provisioner import Provisioner
from karpenter_capi.core.scheduling.packing_memo import PackingMemo
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.demo import DEMO_SCENARIO, mark_unschedulable
from karpenter_capi.sim.manifests import load_manifest_files


def demo_provisioner(
    *, dry_run: bool = False, packing_memo: PackingMemo | None = None
) -> tuple[InMemoryAPIServer, Provisioner]:
    """The demo cluster with its pods marked unschedulable, and a generic_capi provisioner."""
    clock = FakeClock()
    server = new_cluster(clock=clock)
    server.apply_manifests(load_manifest_files([Path(DEMO_SCENARIO)]))
    mark_unschedulable(server)
    plugins = Plugins.load(
        ["generic_capi"],
        PluginEnvironment(
            workload=server, management=server, clock=clock, logger=logging.getLogger("t")
        ),
    )
    provisioner = Provisioner(server, plugins, clock, dry_run=dry_run, packing_memo=packing_memo)
    return server, provisioner
