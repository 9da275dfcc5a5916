"""The ``generic_capi`` provider plugin: any Cluster API infrastructure as Karpenter capacity.

This module is the entry point (``karpenter_capi.plugins`` group, name ``generic_capi``). It
serves ``ClusterAPINodeClass`` and turns the scalable resources a NodeClass selects into the
inventory (see ``inventory``). Launch and delete through the scale subresource land with the
generic_capi issue.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from karpenter_capi.core.errors import NodeClassNotReadyError
from karpenter_capi.core.hookspecs import NodeClass, PluginContext, hookimpl
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.discovery import CapiResources, capi_resources
from karpenter_capi.core.kube.resources import CAPI_NODECLASS_GROUP
from karpenter_capi.plugins.generic_capi.inventory import build_inventory, select_resources

NODECLASS_KIND = "ClusterAPINodeClass"

_discovered_lock = threading.Lock()
# Discovery result per management client: the served CAPI version does not change while we run.
_discovered: dict[int, tuple[KubeClient, CapiResources]] = {}


def _capi(ctx: PluginContext) -> CapiResources:
    key = id(ctx.management)
    with _discovered_lock:
        cached = _discovered.get(key)
        if cached is not None and cached[0] is ctx.management:
            return cached[1]
    resources = capi_resources(ctx.management, os.environ)
    with _discovered_lock:
        _discovered[key] = (ctx.management, resources)
    return resources


def _raw(nodeclass: NodeClass) -> Mapping[str, Any]:
    dump = getattr(nodeclass, "model_dump", None)
    if dump is not None:
        result: Mapping[str, Any] = dump(by_alias=True, exclude_none=True, mode="json")
        return result
    return nodeclass  # type: ignore[return-value]


@hookimpl
def karpenter_capi_nodeclass_kinds() -> list[tuple[str, str]]:
    return [(CAPI_NODECLASS_GROUP, NODECLASS_KIND)]


@hookimpl
def karpenter_capi_instance_types(
    nodeclass: NodeClass, ctx: PluginContext
) -> list[InstanceType] | None:
    raw = _raw(nodeclass)
    if raw.get("kind", NODECLASS_KIND) != NODECLASS_KIND:
        return None
    name = (raw.get("metadata") or {}).get("name", "")
    selector = (raw.get("spec") or {}).get("scalableResourceSelector")
    inventory = build_inventory(select_resources(ctx.management, _capi(ctx), selector))
    for problem in inventory.problems:
        ctx.logger.warning("ClusterAPINodeClass %s: %s", name, problem)
    if not inventory.instance_types:
        detail = "; ".join(str(p) for p in inventory.problems) or (
            "its scalableResourceSelector matches no MachineDeployment, MachineSet or "
            "MachinePool labelled node.cluster.x-k8s.io/karpenter-member"
        )
        raise NodeClassNotReadyError(name, f"no usable capacity: {detail}")
    return inventory.instance_types
