"""Taint toleration and daemon pod tolerations, as the simulated cluster's kube judges them.

The simulator plays kube's controllers apart from the autoprovisioner, so that a scenario fails
when the two disagree; sharing the controller's rules (``core.scheduling.daemons``) would make
any mistake in them invisible. These follow kube's own code, not the controller's:

* ``tolerates``: ``v1.Toleration.ToleratesTaint`` (``k8s.io/api/core/v1/toleration.go``): an
  empty effect or key matches any, ``Exists`` tolerates any value, ``Equal`` (or no operator)
  compares values, any other operator tolerates nothing;
* ``untolerated``: ``FindMatchingUntoleratedTaint`` (``k8s.io/component-helpers``), the first
  taint of the chosen effects that no toleration tolerates;
* ``with_daemon_tolerations``: ``AddOrUpdateDaemonPodTolerations``
  (``pkg/controller/daemon/util``) through ``AddOrUpdateTolerationInPodSpec``: a toleration the
  pod already has keeps its place (replaced there if it differs, e.g. in
  ``tolerationSeconds``); the others are appended.

The taint value type (``core.values.taints.Taint``) is shared; the rules are not.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final

from karpenter_capi.core.values.taints import Taint

_NO_EXECUTE: Final = "NoExecute"
_NO_SCHEDULE: Final = "NoSchedule"
_MATCH_FIELDS: Final = ("key", "operator", "value", "effect")

_DAEMON_TOLERATIONS: Final[tuple[tuple[str, str], ...]] = (
    ("node.kubernetes.io/not-ready", _NO_EXECUTE),
    ("node.kubernetes.io/unreachable", _NO_EXECUTE),
    ("node.kubernetes.io/disk-pressure", _NO_SCHEDULE),
    ("node.kubernetes.io/memory-pressure", _NO_SCHEDULE),
    ("node.kubernetes.io/pid-pressure", _NO_SCHEDULE),
    ("node.kubernetes.io/unschedulable", _NO_SCHEDULE),
)
_HOST_NETWORK_TOLERATION: Final = ("node.kubernetes.io/network-unavailable", _NO_SCHEDULE)


def tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    """Whether ``toleration`` tolerates ``taint`` (``ToleratesTaint``)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    if key and key != taint.key:
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == taint.value


def untolerated(
    tolerations: Sequence[Mapping[str, Any]],
    taints: Iterable[Taint],
    effects: Collection[str] = (_NO_SCHEDULE, _NO_EXECUTE),
) -> Taint | None:
    """The first taint with one of ``effects`` that no toleration tolerates, or ``None``."""
    for taint in taints:
        if taint.effect in effects and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def with_daemon_tolerations(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tolerations of pod ``spec`` once the DaemonSet controller has added its own."""
    tolerations: list[dict[str, Any]] = [dict(t) for t in spec.get("tolerations") or []]
    defaults = list(_DAEMON_TOLERATIONS)
    if spec.get("hostNetwork"):
        defaults.append(_HOST_NETWORK_TOLERATION)
    for key, effect in defaults:
        _add_or_update(tolerations, {"key": key, "operator": "Exists", "effect": effect})
    return tolerations


def _add_or_update(tolerations: list[dict[str, Any]], wanted: dict[str, Any]) -> None:
    # MatchToleration compares the four fields as written ("" and "Equal" differ); a match is
    # replaced where it stands, which leaves an identical one as it was.
    matched = False
    for index, existing in enumerate(tolerations):
        if all((existing.get(f) or "") == (wanted.get(f) or "") for f in _MATCH_FIELDS):
            tolerations[index] = dict(wanted)
            matched = True
    if not matched:
        tolerations.append(dict(wanted))
