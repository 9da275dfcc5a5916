"""Which nodes disruption may take: never a scalable resource below its min size.

Karpenter decides which nodes to consolidate; Cluster API holds the floor. A MachineDeployment,
MachineSet or MachinePool annotated ``cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size``
must keep that many replicas, so the delete hook replaces a Machine instead of shrinking such a
resource (``delete``). Consolidating that node would then save nothing, and emptying it would
only bring a fresh Machine back: disruption must not pick it. ``karpenter_capi_disruption_blocked``
answers with the NodeClaims beyond each resource's headroom (replicas minus min size), keeping
the first ones of the list, which is the order disruption prefers them in.

The resource of a NodeClaim is the one it was launched through (its
``karpenter.cluster.x-k8s.io/scalable-resource`` annotation), read through the plugin's
resource cache, so a pass over 1,000 candidates reads each resource at most once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from karpenter_capi.plugins.generic_capi.binding import claim_facts
from karpenter_capi.plugins.generic_capi.instances import ResourceCache
from karpenter_capi.plugins.generic_capi.scaling import (
    ResourceRef,
    min_size_of,
    scale_down_headroom,
)


def blocked_by_min_size(nodeclaims: Iterable[Any], resources: ResourceCache) -> dict[str, str]:
    """NodeClaim name -> why removing it (with the ones before it) would break a min size."""
    spent: dict[str, int] = {}
    blocked: dict[str, str] = {}
    for nodeclaim in nodeclaims:
        claim = claim_facts(nodeclaim)
        if claim.deleting or not claim.intent:
            continue
        ref = ResourceRef.parse(claim.intent)
        obj = resources.get(ref) if ref is not None else None
        if ref is None or obj is None:
            continue
        headroom = scale_down_headroom(obj)
        if headroom is None:
            continue
        used = spent.get(ref.key, 0)
        if used >= headroom:
            blocked[claim.name] = f"{ref} is at its min size ({min_size_of(obj)})"
            continue
        spent[ref.key] = used + 1
    return blocked
