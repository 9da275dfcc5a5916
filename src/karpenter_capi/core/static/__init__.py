"""Static NodePools: a fixed node count (``spec.replicas``) instead of following pending pods.

``plan`` counts a static NodePool's NodeClaims and chooses what to create or delete;
``controllers`` acts on it (upstream's ``static.provisioning`` and ``static.deprovisioning``).
Replacing drifted static nodes one for one is a disruption method
(``core.disruption.staticdrift``); the rest of the controller only leaves static pools alone:
provisioning never launches for them, consolidation never picks their nodes. See
``docs/static-nodepools.md``.
"""

from __future__ import annotations

from karpenter_capi.core.runtime.controller import ControllerContext
from karpenter_capi.core.static.controllers import (
    StaticDeprovisioningController,
    StaticProvisioningController,
)


def static_controllers(
    ctx: ControllerContext,
) -> list[StaticProvisioningController | StaticDeprovisioningController]:
    """Both static NodePool controllers, sharing ``ctx``."""
    return [StaticProvisioningController(ctx), StaticDeprovisioningController(ctx)]


__all__ = ["StaticDeprovisioningController", "StaticProvisioningController", "static_controllers"]
