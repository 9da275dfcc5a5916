"""Which Cluster API provider versions each launch mode needs: checked at start, on the NodeClass.

Each mode relies on behaviour its providers gained in a given release (the tables *Minimum
versions* in docs/generic-capi.md, docs/aws.md and docs/azure.md). An older provider fails in
ways nothing in the cluster would explain: an API the plugin writes is not served, or a
scale-down removes another node. So the first time a process judges a NodeClass, each
provider the NodeClass's mode relies on is looked up and the NodeClass gets that provider's
condition: ``False`` (with a Warning Event) naming the minimum and the version found, or
``True``. Launches are not refused: a user may run a patched provider.

Where the version comes from: the ``Provider`` object clusterctl and the cluster-api-operator
keep for each installed provider (``providers.clusterctl.cluster.x-k8s.io``, ``type``,
``providerName``, ``version: v1.17.2``): it is what ``clusterctl upgrade`` itself reads. A
provider installed another way has none; then the version is unknown, nothing is written, and a
log line says the check was skipped.

The modes share this module (``capa`` and ``capz`` build on ``generic_capi``); each names its
``Minimum`` rows.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.plugin_api import PluginContext, Resource
from karpenter_capi.plugin_api.karpenter import format_timestamp
from karpenter_capi.plugin_api.kube import (
    CLUSTER_API_NODE_CLASSES,
    WARNING,
    ApiError,
    Conflict,
    EventRecorder,
    NotFound,
)

log = logging.getLogger(__name__)

PROVIDERS: Final = Resource(
    "clusterctl.cluster.x-k8s.io", "v1alpha3", "providers", "Provider", True
)
_SEMVER: Final = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class Minimum:
    """One provider a mode needs at ``minimum`` or later, and the condition that says so."""

    provider_type: str  # the Provider's ``type``: CoreProvider, InfrastructureProvider
    provider_name: str  # its ``providerName``: cluster-api, aws, azure
    label: str  # what users call it: Cluster API, CAPA, CAPZ
    minimum: tuple[int, int, int]
    needed_by: str  # the subject of the message: "spec.launch.mode CAPZMachinePool"
    why: str  # what the minimum gives: "so that a scale-down deletes ..."
    condition: str
    reason_too_old: str
    reason_supported: str

    @property
    def minimum_text(self) -> str:
        return "v" + ".".join(str(n) for n in self.minimum)


def installed(ctx: PluginContext, provider_type: str, name: str) -> tuple[str, str] | None:
    """(version, where it was read) of the installed provider, or None when unknown."""
    try:
        providers = ctx.management.list(PROVIDERS).items
    except ApiError:
        return None  # not installed by clusterctl or the operator, or not readable
    for provider in providers:
        spec = {**provider, **(provider.get("spec") or {})}  # v1alpha3 keeps them at the top
        if spec.get("type") == provider_type and spec.get("providerName") == name:
            meta = provider.get("metadata") or {}
            where = f"clusterctl Provider {meta.get('namespace')}/{meta.get('name')}"
            return str(spec.get("version") or ""), where
    return None


def verdict(need: Minimum, found: tuple[str, str]) -> tuple[str, str, str]:
    """(status, reason, message) of ``need``'s condition for the provider ``found``."""
    version, where = found
    minimum = need.minimum_text
    parsed = _SEMVER.match(version)
    if parsed is not None and tuple(int(n) for n in parsed.groups()) >= need.minimum:
        return (
            "True",
            need.reason_supported,
            f"{need.label} {version} ({where}) is at least {minimum}",
        )
    return (
        "False",
        need.reason_too_old,
        f"{need.needed_by} needs {need.label} {minimum} or later, {need.why}; {where} is "
        f"{version or 'of no version'}: upgrade {need.label} (clusterctl upgrade apply)",
    )


def _condition_of(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def check(ctx: PluginContext, nodeclass_name: str, need: Minimum) -> bool:
    """Write the NodeClass's condition for ``need`` (and a Warning Event when it turns False);
    nothing when the version is unknown or the condition already says it. False when the
    NodeClass could not be read (the cluster unreachable, say): try again next time."""
    found = installed(ctx, need.provider_type, need.provider_name)
    if found is None:
        log.info(
            "%s version unknown (no clusterctl Provider): minimum version not checked", need.label
        )
        return True
    status, reason, message = verdict(need, found)
    try:
        live = ctx.workload.get(CLUSTER_API_NODE_CLASSES, nodeclass_name)
    except NotFound:
        return True
    except ApiError:
        return False  # the round's own reads say the cluster is unreachable
    previous = _condition_of(live, need.condition)
    if previous is not None and (
        previous.get("status"),
        previous.get("reason"),
        previous.get("message"),
    ) == (status, reason, message):
        return True
    condition = {
        "type": need.condition,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": format_timestamp(ctx.clock.now()),
    }
    others = [
        c
        for c in (live.get("status") or {}).get("conditions") or []
        if isinstance(c, Mapping) and c.get("type") != need.condition
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
    except NotFound:
        return True
    except (Conflict, ApiError):
        return False  # written by the next judgment
    if status == "False":
        log.warning("ClusterAPINodeClass %s: %s", nodeclass_name, message)
        EventRecorder(ctx.workload, ctx.clock).record(live, WARNING, reason, message)
    return True


class StartChecks:
    """Each NodeClass checked once per process (at start), against its mode's ``Minimum`` rows."""

    def __init__(self, ctx: PluginContext) -> None:
        self._ctx = ctx
        self._checked: set[str] = set()

    def once(self, nodeclass_name: str, needs: Iterable[Minimum]) -> None:
        if not nodeclass_name or nodeclass_name in self._checked:
            return
        done = [check(self._ctx, nodeclass_name, need) for need in needs]  # each one, always
        if all(done):
            self._checked.add(nodeclass_name)


def cluster_api(needed_by: str) -> Minimum:
    """Cluster API core at v1.0: the first release serving ``cluster.x-k8s.io/v1beta1``, the
    oldest API version the plugins read and write (v1beta2 is used when served)."""
    return Minimum(
        provider_type="CoreProvider",
        provider_name="cluster-api",
        label="Cluster API",
        minimum=(1, 0, 0),
        needed_by=needed_by,
        why="the first release serving cluster.x-k8s.io/v1beta1, the oldest API version it "
        "reads and writes",
        condition="ClusterAPIVersionSupported",
        reason_too_old="ClusterAPITooOld",
        reason_supported="ClusterAPISupported",
    )


def infrastructure_provider(
    provider_name: str, label: str, minimum: tuple[int, int, int], needed_by: str, why: str
) -> Minimum:
    """An infrastructure provider (CAPA, CAPZ) a launch mode needs; said on the NodeClass as
    ``ProviderVersionSupported`` (``ProviderTooOld`` / ``ProviderSupported``)."""
    return Minimum(
        provider_type="InfrastructureProvider",
        provider_name=provider_name,
        label=label,
        minimum=minimum,
        needed_by=needed_by,
        why=why,
        condition="ProviderVersionSupported",
        reason_too_old="ProviderTooOld",
        reason_supported="ProviderSupported",
    )
