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
unknown, nothing is written, and a log line says the check was skipped.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Final

from karpenter_capi.plugin_api import PluginContext, Resource
from karpenter_capi.plugin_api.kube import (
    CLUSTER_API_NODE_CLASSES,
    WARNING,
    ApiError,
    Conflict,
    EventRecorder,
    NotFound,
)
from karpenter_capi.plugin_api.model import format_timestamp

log = logging.getLogger(__name__)

CONDITION: Final = "ProviderVersionSupported"
REASON_TOO_OLD: Final = "ProviderTooOld"
REASON_SUPPORTED: Final = "ProviderSupported"
MINIMUM_CAPZ: Final = (1, 17, 0)
PROVIDERS: Final = Resource(
    "clusterctl.cluster.x-k8s.io", "v1alpha3", "providers", "Provider", True
)
_SEMVER: Final = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def installed_capz(ctx: PluginContext) -> tuple[str, str] | None:
    """(version, where it was read) of the installed CAPZ, or None when unknown."""
    try:
        providers = ctx.management.list(PROVIDERS).items
    except ApiError:
        return None  # not installed by clusterctl or the operator, or not readable
    for provider in providers:
        spec = {**provider, **(provider.get("spec") or {})}  # v1alpha3 keeps them at the top
        if spec.get("type") == "InfrastructureProvider" and spec.get("providerName") == "azure":
            meta = provider.get("metadata") or {}
            where = f"clusterctl Provider {meta.get('namespace')}/{meta.get('name')}"
            return str(spec.get("version") or ""), where
    return None


def verdict(found: tuple[str, str]) -> tuple[str, str, str]:
    """(status, reason, message) of the condition for the CAPZ ``found``."""
    version, where = found
    minimum = "v" + ".".join(str(n) for n in MINIMUM_CAPZ)
    parsed = _SEMVER.match(version)
    if parsed is not None and tuple(int(n) for n in parsed.groups()) >= MINIMUM_CAPZ:
        return "True", REASON_SUPPORTED, f"CAPZ {version} ({where}) is at least {minimum}"
    return (
        "False",
        REASON_TOO_OLD,
        f"spec.launch.mode CAPZMachinePool needs CAPZ {minimum} or later, so that a scale-down "
        f"deletes exactly the VM of the NodeClaim being deleted; {where} is "
        f"{version or 'of no version'}: upgrade CAPZ (clusterctl upgrade apply)",
    )


def _condition_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == CONDITION:
            return condition
    return None


def check(ctx: PluginContext, nodeclass_name: str) -> None:
    """Write the NodeClass's ``ProviderVersionSupported`` condition (and a Warning Event when
    it turns False); nothing when the version is unknown or the condition already says it."""
    found = installed_capz(ctx)
    if found is None:
        log.info("CAPZ version unknown (no clusterctl Provider): minimum version not checked")
        return
    status, reason, message = verdict(found)
    try:
        live = ctx.workload.get(CLUSTER_API_NODE_CLASSES, nodeclass_name)
    except NotFound:
        return
    previous = _condition_of(live)
    if previous is not None and (
        previous.get("status"),
        previous.get("reason"),
        previous.get("message"),
    ) == (status, reason, message):
        return
    condition = {
        "type": CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": format_timestamp(ctx.clock.now()),
    }
    others = [
        c
        for c in (live.get("status") or {}).get("conditions") or []
        if isinstance(c, Mapping) and c.get("type") != CONDITION
    ]
    try:
        ctx.workload.patch(
            CLUSTER_API_NODE_CLASSES,
            nodeclass_name,
            {
                "metadata": {
                    "resourceVersion": (live.get("metadata") or {}).get("resourceVersion")
                },
                "status": {"conditions": [*others, condition]},
            },
            subresource="status",
        )
    except (Conflict, NotFound):
        return  # the next start (or judgment) writes it
    if status == "False":
        log.warning("ClusterAPINodeClass %s: %s", nodeclass_name, message)
        EventRecorder(ctx.workload, ctx.clock).record(live, WARNING, reason, message)
