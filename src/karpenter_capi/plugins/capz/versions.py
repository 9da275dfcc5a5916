"""The CAPZ version the ``CAPZMachinePool`` mode needs, checked at start and said on the NodeClass.

The mode relies on CAPZ deleting exactly the Machine marked ``cluster.x-k8s.io/delete-machine``
when a pool's replicas are lowered; CAPZ does so from v1.17 (docs/azure.md, *Minimum
versions*). With an older CAPZ a scale-down can remove another VM, a node with pods on it, which
nothing in the cluster would explain. So the first time a process judges a NodeClass of this
mode, it reads the installed CAPZ version and writes the NodeClass condition
``ProviderVersionSupported``: ``False`` (reason ``ProviderTooOld``, with a Warning Event) naming
the minimum and the version found, or ``True``. The launch is not refused: the risk is on
scale-down only, and a user may run a patched CAPZ.

Where the version comes from: the ``Provider`` object clusterctl and the cluster-api-operator
keep for each installed provider (``providers.clusterctl.cluster.x-k8s.io``, ``type:
InfrastructureProvider``, ``providerName: azure``, ``version: v1.17.2``): it is what
``clusterctl upgrade`` itself reads. A CAPZ installed another way has none; then the version is
unknown, nothing is written, and a log line says the check was skipped. The reading and the
condition are shared with the other modes (``generic_capi.provider_versions``); the mode also
needs Cluster API core v1.0 (its own condition, ``ClusterAPIVersionSupported``).
"""

from __future__ import annotations

from typing import Final

from karpenter_capi.plugin_api import PluginContext
from karpenter_capi.plugins.generic_capi import provider_versions
from karpenter_capi.plugins.generic_capi.provider_versions import (
    cluster_api,
    infrastructure_provider,
)

NEEDED_BY: Final = "spec.launch.mode CAPZMachinePool"
CAPZ: Final = infrastructure_provider(
    "azure",
    "CAPZ",
    (1, 17, 0),
    NEEDED_BY,
    "so that a scale-down deletes exactly the VM of the NodeClaim being deleted",
)
NEEDS: Final = (CAPZ, cluster_api(NEEDED_BY))


def check(ctx: PluginContext, nodeclass_name: str) -> None:
    """Write the NodeClass's version conditions for CAPZ and Cluster API core."""
    for need in NEEDS:
        provider_versions.check(ctx, nodeclass_name, need)
