"""Which Cluster API version this management cluster serves.

CAPI moved from ``v1beta1`` to ``v1beta2`` (CAPI 1.11) and clusters in the field serve either.
Rather than hard-coding one, the controller asks the API server at start-up and builds its
resource descriptors for the version it found: ``v1beta2`` when served, else ``v1beta1``.
Anything else fails fast with an error that says what was looked for and what is there.

Like cluster-autoscaler's ``clusterapi`` provider, two environment variables override the
defaults: ``CAPI_GROUP`` replaces the API group (for distributions that rename it; empty means
the default ``cluster.x-k8s.io``), and ``CAPI_VERSION`` pins the version instead of choosing
one. Unlike cluster-autoscaler, a pinned version must still be served, so a typo is reported at
start-up rather than as a stream of 404s.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.resources import (
    CAPI_GROUP,
    CLUSTERS,
    MACHINE_DEPLOYMENTS,
    MACHINE_POOLS,
    MACHINE_SETS,
    MACHINES,
    Resource,
)

CAPI_GROUP_ENV = "CAPI_GROUP"
CAPI_VERSION_ENV = "CAPI_VERSION"

SUPPORTED_CAPI_VERSIONS = ("v1beta2", "v1beta1")
"""Versions this controller can read, most preferred first."""

_log = logging.getLogger(__name__)


class CapiNotServedError(RuntimeError):
    """The management cluster does not serve a usable Cluster API version."""

    def __init__(self, group: str, served: list[str], wanted: list[str]) -> None:
        self.group = group
        self.served = list(served)
        self.wanted = list(wanted)
        if served:
            found = f"it serves {', '.join(served)}"
        else:
            found = "the group is not served at all (are the Cluster API CRDs installed?)"
        super().__init__(f"API group {group!r} must serve one of {', '.join(wanted)}, but {found}")


@dataclass(frozen=True, slots=True)
class CapiResources:
    """The Cluster API resources at the group and version the cluster serves."""

    group: str
    version: str
    clusters: Resource
    machines: Resource
    machine_sets: Resource
    machine_deployments: Resource
    machine_pools: Resource

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @classmethod
    def at(cls, group: str, version: str) -> CapiResources:
        """The descriptors re-targeted to ``group``/``version``."""

        def retarget(resource: Resource) -> Resource:
            return dataclasses.replace(resource.with_version(version), group=group)

        return cls(
            group=group,
            version=version,
            clusters=retarget(CLUSTERS),
            machines=retarget(MACHINES),
            machine_sets=retarget(MACHINE_SETS),
            machine_deployments=retarget(MACHINE_DEPLOYMENTS),
            machine_pools=retarget(MACHINE_POOLS),
        )


def capi_resources(client: KubeClient, environ: Mapping[str, str]) -> CapiResources:
    """Discover the Cluster API version to use (see the module docstring for the rules)."""
    group = environ.get(CAPI_GROUP_ENV, "").strip() or CAPI_GROUP
    pinned = environ.get(CAPI_VERSION_ENV, "").strip()
    served = list(client.served_versions(group))
    if pinned:
        if pinned not in served:
            raise CapiNotServedError(group, served, [f"{pinned} (from {CAPI_VERSION_ENV})"])
        version = pinned
    else:
        usable = [candidate for candidate in SUPPORTED_CAPI_VERSIONS if candidate in served]
        if not usable:
            raise CapiNotServedError(group, served, list(SUPPORTED_CAPI_VERSIONS))
        version = usable[0]
    _log.info("using Cluster API %s/%s (served: %s)", group, version, ", ".join(served))
    return CapiResources.at(group, version)
