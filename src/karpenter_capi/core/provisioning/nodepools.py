"""A NodePool as the solver takes it: its requirements, taints and limits resolved
(``nodepool_option``), and what its NodeClaims already count against those limits
(``nodepool_usage``). Read from the same snapshot as the existing nodes (``state``), kept apart
from it because provisioning, static NodePools and disruption's simulations each resolve
NodePools, while only the rounds and the passes read the nodes."""

from __future__ import annotations

from collections.abc import Mapping

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.provisioning.state import (
    ClusterSnapshot,
    claim_instance_types,
    taints_of,
)
from karpenter_capi.core.scheduling.solver_io import NodePoolOption
from karpenter_capi.core.values.requirements import Requirements
from karpenter_capi.core.values.resources import ResourceList, empty


def nodepool_usage(
    nodepool: str, snapshot: ClusterSnapshot, types: Mapping[str, InstanceType]
) -> ResourceList:
    """What a NodePool's NodeClaims count against its limits, plus ``nodes``: their number.

    A claim counts its reported capacity, or until it reports one, the largest capacity among
    the instance types it may become (as Karpenter: pessimistic until launched).
    """
    total = empty()
    count = 0
    for claim in snapshot.nodeclaims:
        labels = claim["metadata"].get("labels") or {}
        if labels.get(wellknown.LABEL_NODEPOOL) != nodepool:
            continue
        count += 1
        capacity = (claim.get("status") or {}).get("capacity")
        if capacity:
            total = total.add(ResourceList.parse(capacity))
            continue
        largest = empty()
        for name in claim_instance_types(claim):
            if name in types:
                largest = largest.max_merge(types[name].capacity)
        total = total.add(largest)
    return total.add(ResourceList.from_milli({"nodes": count * 1000}))


def nodepool_option(inventory: NodePoolInventory, snapshot: ClusterSnapshot) -> NodePoolOption:
    """A resolved (and validated) NodePool as the solver takes it."""
    assert inventory.model is not None
    template = (inventory.raw.get("spec") or {}).get("template") or {}
    spec = template.get("spec") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    requirements = Requirements.from_dicts(spec.get("requirements") or []).merged(
        Requirements.from_labels(labels)
    )
    limits = (inventory.raw.get("spec") or {}).get("limits")
    by_name = {it.name: it for it in inventory.instance_types}
    return NodePoolOption(
        name=inventory.nodepool,
        instance_types=tuple(inventory.instance_types),
        requirements=requirements,
        weight=inventory.model.weight,
        taints=taints_of(spec.get("taints")),
        startup_taints=taints_of(spec.get("startupTaints")),
        limits=ResourceList.parse(limits) if limits else None,
        usage=nodepool_usage(inventory.nodepool, snapshot, by_name),
    )
