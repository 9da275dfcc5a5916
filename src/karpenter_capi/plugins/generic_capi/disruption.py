"""Which nodes disruption may take: never a scalable resource below its min size.

Karpenter decides which nodes to consolidate; Cluster API holds the floor. A MachineDeployment,
MachineSet or MachinePool annotated ``cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size``
must keep that many replicas, so the delete hook replaces a Machine instead of shrinking such a
resource (``delete``). Consolidating that node would then save nothing, and emptying it would
only bring a fresh Machine back: disruption must not pick it. ``karpenter_capi_disruption_blocked``
answers with the NodeClaims beyond each resource's headroom (its Machines that stay, those of
NodeClaims already deleting left out, minus the min size), keeping the first ones of the list,
which is the order disruption prefers them in.

The resource of a NodeClaim is the one it was launched through (its
``karpenter.cluster.x-k8s.io/scalable-resource`` annotation), read through the plugin's
resource cache and its Machines through the plugin's mirrors, so a pass over 1,000 candidates
reads each resource at most once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from karpenter_capi.plugins.generic_capi.binding import claim_facts
from karpenter_capi.plugins.generic_capi.instances import ResourceCache
from karpenter_capi.plugins.generic_capi.mirror import ClusterMirrors
from karpenter_capi.plugins.generic_capi.scaling import (
    ResourceRef,
    min_size_of,
)


def blocked_by_min_size(
    nodeclaims: Iterable[Any], resources: ResourceCache, mirrors: ClusterMirrors
) -> dict[str, str]:
    """NodeClaim name -> why removing it (with the ones before it) would break a min size."""
    candidates = [claim_facts(c) for c in nodeclaims]
    candidates = [c for c in candidates if not c.deleting and c.intent]
    if not candidates:
        return {}
    # NodeClaims already on their way out still have live Machines until their drain ends:
    # those replicas are spoken for.
    leaving = {c.name for c in mirrors.claims() if c.deleting}
    staying: dict[str, int] = {}
    blocked: dict[str, str] = {}
    for claim in candidates:
        ref = ResourceRef.parse(claim.intent)
        obj = resources.get(ref) if ref is not None else None
        if ref is None or obj is None:
            continue
        minimum = min_size_of(obj)
        if minimum is None:
            continue
        if ref.key not in staying:
            machines = mirrors.machines_of(ref)
            staying[ref.key] = sum(1 for m in machines if m.alive and m.claim not in leaving)
        if staying[ref.key] <= minimum:
            blocked[claim.name] = f"{ref} is at its min size ({minimum})"
            continue
        staying[ref.key] -= 1
    return blocked
