"""PodDisruptionBudget arithmetic and the Eviction API's decision, as kube computes them.

Karpenter drains nodes through the Eviction API, and a drain that ignores PDBs (or one that
never finishes because the budget math is wrong) is exactly the bug a simulation must catch.
This module holds the two halves kube splits between the disruption controller (a PDB's
``status``: currentHealthy, desiredHealthy, expectedPods, disruptionsAllowed) and the eviction
subresource (allow the eviction, or 429 with the budget's numbers).

As in kube, ``expectedPods`` comes from the scale of the pods' controllers when the budget
needs it (``maxUnavailable``, percentages): a pod evicted from a ReplicaSet of 3 still counts
as expected, so a drain cannot walk through a budget one eviction at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from karpenter_capi.core.kube.errors import InternalError, TooManyRequests
from karpenter_capi.core.values.selectors import SelectorError, selector_matches

JsonObject = dict[str, Any]

DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
ScaleOf = Callable[[list[JsonObject]], "int | None"]


def scaled_value(value: Any, total: int, *, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``: an int as is, ``"N%"`` of ``total``."""
    if isinstance(value, str) and value.endswith("%"):
        percent = int(value[:-1])
        scaled = percent * total / 100
        return math.ceil(scaled) if round_up else math.floor(scaled)
    return int(value)


def pod_is_healthy(pod: JsonObject) -> bool:
    """Running and Ready (a Running pod with no conditions at all counts as ready)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = status.get("conditions")
    if not conditions:
        return True
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pdb_selects(pdb: JsonObject, pod: JsonObject) -> bool:
    """policy/v1: a nil selector selects nothing, an empty one every pod of the namespace."""
    if (pdb.get("metadata") or {}).get("namespace") != (pod.get("metadata") or {}).get("namespace"):
        return False
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return False
    try:
        return selector_matches(
            selector, (pod.get("metadata") or {}).get("labels") or {}, nil_matches=False
        )
    except SelectorError:
        return False


def pdb_status(
    pdb: JsonObject, pods: list[JsonObject], expected_scale: ScaleOf, now: str
) -> JsonObject:
    """The status the disruption controller would write for ``pdb`` given the namespace's pods.

    ``expected_scale`` sums the desired replicas of the selected pods' controllers, or returns
    ``None`` when a pod has none; kube then fails safe and allows no disruption, and so does
    this (with ``maxUnavailable`` or a percentage ``minAvailable``, which need that scale).
    ``now`` stamps the ``DisruptionAllowed`` condition when its status changes.
    """
    spec = pdb.get("spec") or {}
    selected = [p for p in pods if pdb_selects(pdb, p)]
    healthy = sum(1 for p in selected if pod_is_healthy(p))
    expected: int | None = len(selected)
    desired = 0
    max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
    if max_unavailable is not None:
        expected = expected_scale(selected)
        if expected is not None:
            unavailable = scaled_value(max_unavailable, expected, round_up=True)
            desired = max(0, expected - unavailable)
    elif isinstance(min_available, str):
        expected = expected_scale(selected)
        if expected is not None:
            desired = scaled_value(min_available, expected, round_up=True)
    elif min_available is not None:
        desired = int(min_available)
    generation = (pdb.get("metadata") or {}).get("generation", 1)
    if expected is None:
        allowed, reason, expected, desired = 0, "SyncFailed", 0, 0
        message = "found no controllers for the pods selected by this budget"
    else:
        allowed = max(0, healthy - desired)
        reason = "SufficientPods" if allowed > 0 else "InsufficientPods"
        message = ""
    return {
        "observedGeneration": generation,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "disruptionsAllowed": allowed,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "True" if allowed > 0 else "False",
                "reason": reason,
                "message": message,
                "observedGeneration": generation,
                "lastTransitionTime": _transition_time(pdb.get("status") or {}, allowed > 0, now),
            }
        ],
    }


def _transition_time(previous: JsonObject, allowed: bool, now: str) -> str:
    """``meta.SetStatusCondition``: kept while the status holds, ``now`` when it changes."""
    for condition in previous.get("conditions") or []:
        if condition.get("type") == "DisruptionAllowed":
            was_allowed = condition.get("status") == "True"
            if was_allowed == allowed and condition.get("lastTransitionTime"):
                return str(condition["lastTransitionTime"])
    return now


def eviction_ignores_budgets(pod: JsonObject) -> bool:
    """Pods that are not (or no longer) running are evicted without consulting any PDB."""
    phase = (pod.get("status") or {}).get("phase")
    deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
    return phase in ("Pending", "Succeeded", "Failed") or bool(deleting)


def check_eviction(pod: JsonObject, budgets: list[JsonObject]) -> None:
    """Raise what the eviction subresource answers when ``budgets`` forbid evicting ``pod``."""
    if eviction_ignores_budgets(pod):
        return
    matching = [pdb for pdb in budgets if pdb_selects(pdb, pod)]
    if not matching:
        return
    if len(matching) > 1:
        raise InternalError(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support."
        )
    pdb = matching[0]
    status = pdb.get("status") or {}
    current, desired = int(status.get("currentHealthy", 0)), int(status.get("desiredHealthy", 0))
    if not pod_is_healthy(pod) and current >= desired:
        return  # an unhealthy pod may go while the budget is met (IfHealthyBudget)
    if int(status.get("disruptionsAllowed", 0)) > 0:
        return
    name = (pdb.get("metadata") or {}).get("name")
    raise TooManyRequests(
        "Cannot evict pod as it would violate the pod's disruption budget.",
        details={
            "causes": [
                {
                    "reason": DISRUPTION_BUDGET_CAUSE,
                    "message": f"The disruption budget {name} needs {desired} healthy pods "
                    f"and has {current} currently",
                }
            ]
        },
    )
