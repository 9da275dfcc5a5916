"""The arithmetic of a MachineDeployment rollout, as CAPI's ``mdutil`` does it: no writes.

Why a module of its own: ``machinedeployment.py`` reconciles (reads, patches, deletes); how many
replicas each MachineSet should have, what an int-or-percentage resolves to and what the
deployment's status says follow from the sets alone, and are checked against CAPI's rules more
easily apart from the writes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.values.selectors import selector_to_string
from karpenter_capi.sim.capi.objects import (
    ANNOTATION_REVISION,
    annotations_of,
    as_int,
    created_at,
    desired_replicas,
    metadata,
    name_of,
    nested,
)
from karpenter_capi.sim.capi.shapes import Strategy, replica_status
from karpenter_capi.sim.capi.templates import deployment_selector

# As the controller's: a malformed rollout value is the deployment's problem, logged there.
_log = logging.getLogger("karpenter_capi.sim.capi.machinedeployment")

ON_DELETE = "OnDelete"
ROLLING_UPDATE = "RollingUpdate"


def scaled_value(value: int | str | None, total: int, *, round_up: bool, default: int) -> int:
    """An int-or-percentage against ``total`` (``intstr.GetScaledValueFromIntOrPercent``);
    a malformed value counts as ``default``."""
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return max(0, value)
    text = str(value).strip()
    try:
        if text.endswith("%"):
            fraction = float(text[:-1]) * total / 100
            return max(0, math.ceil(fraction) if round_up else math.floor(fraction))
        return max(0, int(text))
    except ValueError:
        _log.warning("ignoring malformed rollout value %r", value)
        return default


def fenceposts(strategy: Strategy, replicas: int) -> tuple[int, int]:
    """``(maxSurge, maxUnavailable)`` resolved as ``mdutil.ResolveFenceposts``: both zero
    would deadlock, so ``maxUnavailable`` becomes 1."""
    surge = scaled_value(strategy.max_surge, replicas, round_up=True, default=1)
    unavailable = scaled_value(strategy.max_unavailable, replicas, round_up=False, default=0)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def revision_of(ms: Mapping[str, Any]) -> int:
    return as_int(annotations_of(ms).get(ANNOTATION_REVISION), 0)


@dataclass
class MachineSetView:
    """A MachineSet as this reconcile sees it: ``replicas`` follows the writes it makes."""

    obj: JsonObject
    replicas: int

    @property
    def name(self) -> str:
        return name_of(self.obj)

    @property
    def status_replicas(self) -> int:
        return as_int(nested(self.obj, "status", "replicas"), 0)

    @property
    def available(self) -> int:
        return as_int(nested(self.obj, "status", "availableReplicas"), 0)

    @property
    def ready(self) -> int:
        return as_int(nested(self.obj, "status", "readyReplicas"), 0)

    @property
    def created(self) -> str:
        return str(metadata(self.obj).get("creationTimestamp") or "")


def total_sum(sets: Iterable[MachineSetView]) -> int:
    """``mdutil.TotalMachineSetsReplicaSum``: max of desired and actual per set."""
    return sum(max(s.replicas, s.status_replicas) for s in sets)


def by_creation(sets: Iterable[MachineSetView]) -> list[MachineSetView]:
    return sorted(sets, key=lambda s: (created_at(s.obj) is None, s.created, s.name))


def new_replicas_rolling(
    md: JsonObject, strategy: Strategy, new: MachineSetView, old: Sequence[MachineSetView]
) -> int:
    """``mdutil.NewMSNewReplicas`` for RollingUpdate: grow within ``replicas + maxSurge``."""
    replicas = desired_replicas(md)
    surge = scaled_value(strategy.max_surge, replicas, round_up=True, default=1)
    current = total_sum([*old, new])
    max_total = replicas + surge
    if current >= max_total:
        return new.replicas
    return new.replicas + min(max_total - current, replicas - new.replicas)


def new_replicas_on_delete(
    md: JsonObject, new: MachineSetView, old: Sequence[MachineSetView]
) -> int:
    """``mdutil.NewMSNewReplicas`` for OnDelete: grow into what old sets gave up."""
    replicas = desired_replicas(md)
    current = total_sum([*old, new])
    if current >= replicas:
        return new.replicas
    return new.replicas + (replicas - current)


def deployment_status(
    md: JsonObject, shape: str, new: MachineSetView | None, old: Sequence[MachineSetView]
) -> tuple[JsonObject, bool]:
    """The deployment's status in its layout, and whether the rollout is complete
    (``mdutil.DeploymentComplete``)."""
    sets = [*old, new] if new is not None else list(old)
    desired = desired_replicas(md)
    replicas = sum(s.status_replicas for s in sets)
    ready = sum(s.ready for s in sets)
    available = sum(s.available for s in sets)
    up_to_date = new.status_replicas if new is not None else 0
    unavailable = max(desired - available, 0)
    if replicas > desired:
        phase = "ScalingDown"
    elif desired > ready:
        phase = "ScalingUp"
    else:
        phase = "Running"
    status = replica_status(
        shape,
        replicas=replicas,
        ready=ready,
        available=available,
        up_to_date=up_to_date,
        selector=selector_to_string(deployment_selector(md)),
        generation=metadata(md).get("generation"),
        legacy={"updatedReplicas": up_to_date, "unavailableReplicas": unavailable},
    )
    status["phase"] = phase
    return status, up_to_date == desired == replicas == available
