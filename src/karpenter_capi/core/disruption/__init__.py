"""Voluntary disruption: expiration, emptiness, drift and consolidation, within budgets.

Layers (imports go one way): ``candidates`` and ``budgets`` read the cluster; ``simulation``
asks the provisioning solver whether pods could move; ``methods`` turn candidates into commands;
``planner`` runs one pass; ``orchestration`` carries a command out; ``controller`` is the
periodic loop; ``conditions`` keeps ``Consolidatable``/``Drifted``/``lastPodEventTime`` on each
NodeClaim and ``expiration`` deletes expired ones; ``verdicts`` says, per node, why a pass keeps
it (``Unconsolidatable`` Events, ``karpenter-capi explain``). See ``docs/disruption.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from karpenter_capi.core.disruption.conditions import NodeClaimDisruptionController
from karpenter_capi.core.disruption.controller import DisruptionController, DisruptionSettings
from karpenter_capi.core.disruption.expiration import ExpirationController
from karpenter_capi.core.runtime.controller import ControllerContext

__all__ = [
    "DisruptionController",
    "DisruptionSettings",
    "ExpirationController",
    "NodeClaimDisruptionController",
    "disruption_controllers",
]


def disruption_controllers(
    ctx: ControllerContext,
    *,
    nominated: Callable[[float], frozenset[str]] | None = None,
    nominations: Callable[[], Mapping[str, frozenset[str]]] | None = None,
    is_leader: Callable[[], bool] | None = None,
    settings: DisruptionSettings | None = None,
) -> list[Any]:
    """The three disruption controllers, ready for ``Manager.add``."""
    kwargs: dict[str, Any] = {"settings": settings}
    if nominated is not None:
        kwargs["nominated"] = nominated
    if nominations is not None:
        kwargs["nominations"] = nominations
    if is_leader is not None:
        kwargs["is_leader"] = is_leader
    conditions = NodeClaimDisruptionController(ctx)
    return [
        conditions,
        ExpirationController(ctx),
        DisruptionController(ctx, dry_run_status=conditions.with_dry_run_status, **kwargs),
    ]
