"""Termination: finalizers, cordon, drain through the Eviction API, and machine removal.

A Node or NodeClaim that is deleted must not simply vanish: its pods need to move elsewhere
under their PodDisruptionBudgets, the machine behind it must be removed through its provider
plugin, and the Node and NodeClaim must go together. The ``karpenter.sh/termination`` finalizer
holds both objects while the two controllers here do that work (see ``controllers.py``);
``docs/termination.md`` describes the behaviour for users.
"""

from karpenter_capi.core.runtime.controller import ControllerContext
from karpenter_capi.core.termination.controllers import (
    NodeClaimTerminationController,
    NodeTerminationController,
)
from karpenter_capi.core.termination.drain import Drainer, DrainResult


def termination_controllers(
    ctx: ControllerContext,
) -> list[NodeTerminationController | NodeClaimTerminationController]:
    """Both termination controllers, as ``karpenter-capi run`` runs them."""
    return [NodeTerminationController(ctx), NodeClaimTerminationController(ctx)]


__all__ = [
    "DrainResult",
    "Drainer",
    "NodeClaimTerminationController",
    "NodeTerminationController",
    "termination_controllers",
]
