"""The NodeClaim lifecycle: launch, registration, initialization, liveness, garbage collection.

Between the provisioner creating a NodeClaim and the termination flow removing it, these
controllers make the NodeClaim real and keep it honest: ask a provider plugin for a machine,
adopt the Node that joins, say when it is usable, give up on ones that never come, and clean up
NodeClaims and machines that lost their other half. ``docs/lifecycle.md`` tells the story;
``lifecycle_controllers`` builds what the runtime runs.
"""

from __future__ import annotations

from karpenter_capi.core.lifecycle.controller import NodeClaimLifecycleController
from karpenter_capi.core.lifecycle.counter import NodePoolCounterController
from karpenter_capi.core.lifecycle.garbagecollection import (
    DEFAULT_INTERVAL,
    DEFAULT_ORPHAN_GRACE,
    ORPHAN_INSTANCE_ANNOTATION,
    NodeClaimGarbageCollector,
    orphan_nodeclaim,
)
from karpenter_capi.core.lifecycle.liveness import (
    DEFAULT_LAUNCH_TIMEOUT,
    DEFAULT_REGISTRATION_TIMEOUT,
)
from karpenter_capi.core.lifecycle.nodepool import NodePoolReadinessController
from karpenter_capi.core.lifecycle.unclaimed import UnclaimedNodeController
from karpenter_capi.core.runtime.controller import ControllerContext


def lifecycle_controllers(
    ctx: ControllerContext,
    *,
    launch_timeout: float = DEFAULT_LAUNCH_TIMEOUT,
    registration_timeout: float = DEFAULT_REGISTRATION_TIMEOUT,
    gc_interval: float = DEFAULT_INTERVAL,
    orphan_grace: float = DEFAULT_ORPHAN_GRACE,
) -> list[
    NodeClaimLifecycleController
    | NodeClaimGarbageCollector
    | NodePoolReadinessController
    | NodePoolCounterController
    | UnclaimedNodeController
]:
    """The lifecycle controller, the garbage collector, NodePool readiness, the NodePool
    counter (``status.resources``, ``status.nodes``) and the warning on Nodes no NodeClaim
    holds, sharing ``ctx`` (times in seconds)."""
    return [
        NodeClaimLifecycleController(
            ctx, launch_timeout=launch_timeout, registration_timeout=registration_timeout
        ),
        NodeClaimGarbageCollector(ctx, interval=gc_interval, orphan_grace=orphan_grace),
        NodePoolReadinessController(ctx),
        NodePoolCounterController(ctx),
        UnclaimedNodeController(ctx),
    ]


__all__ = [
    "ORPHAN_INSTANCE_ANNOTATION",
    "NodeClaimGarbageCollector",
    "NodeClaimLifecycleController",
    "NodePoolCounterController",
    "NodePoolReadinessController",
    "UnclaimedNodeController",
    "lifecycle_controllers",
    "orphan_nodeclaim",
]
