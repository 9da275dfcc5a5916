"""The two field layouts of Cluster API objects, v1beta1 and v1beta2, read and written.

The simulated management cluster converts Cluster API's core kinds between versions as a real
one does (``sim.apiserver.capi_core_versions``): an object read at v1beta1 is in v1beta1's
layout, one read at v1beta2 in v1beta2's. The emulation reads each setting from where that
layout keeps it and writes status where a client of that version looks for it.

How the layout is decided, first answer wins:

0. the object's ``apiVersion`` (``cluster.x-k8s.io/v1beta1|v1beta2``): what the server served;
1. the annotation ``sim.karpenter.cluster.x-k8s.io/api-shape: v1beta1|v1beta2`` (the emulation
   puts it on every MachineSet and Machine it creates, inheriting its owner's layout);
2. a field only one layout has (``spec.strategy`` vs ``spec.rollout``, ``spec.deletePolicy`` vs
   ``spec.deletion``, a reference with ``apiVersion`` vs ``apiGroup``, ``status.v1beta2`` vs
   ``status.deprecated``, ...);
3. ``EmulationSettings.default_shape``.

Field paths that differ (v1beta1 -> v1beta2; the full table is in docs/capi-emulation.md):

- rollout strategy: ``spec.strategy`` -> ``spec.rollout.strategy``;
- deletion order: MachineDeployment ``spec.strategy.rollingUpdate.deletePolicy``, MachineSet
  ``spec.deletePolicy`` -> ``spec.deletion.order`` on both;
- references: ``{apiVersion, kind, name, namespace}`` -> ``{apiGroup, kind, name}``; a
  Machine's ``nodeRef``: ``{apiVersion, kind, name, uid}`` -> ``{name}``;
- readiness: ``status.infrastructureReady``/``bootstrapReady`` ->
  ``status.initialization.{infrastructureProvisioned,bootstrapDataSecretCreated}``;
- terminal failure: ``status.failureReason``/``failureMessage`` ->
  ``status.deprecated.v1beta1.failure*`` plus a False condition;
- conditions: CAPI's own type in ``status.conditions`` and ``metav1.Condition`` in
  ``status.v1beta2.conditions`` -> ``metav1.Condition`` in ``status.conditions`` and the old
  type in ``status.deprecated.v1beta1.conditions``;
- replica counters: ``updatedReplicas``/``unavailableReplicas`` -> ``upToDateReplicas``.

``spec.template.spec.failureDomain``, ``spec.providerID``, ``spec.replicas`` and
``spec.providerIDList`` are the same in both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.sim.capi.objects import annotations_of, nested
from karpenter_capi.sim.capi.settings import ANNOTATION_SHAPE, SHAPES, V1BETA1, V1BETA2

CAPI_GROUP = "cluster.x-k8s.io"
# Top-level ``spec`` fields of MachineDeployment/MachineSet/MachinePool only one layout has.
_SCALABLE_SPEC_MARKERS: dict[str, str] = {
    "strategy": V1BETA1,
    "rolloutAfter": V1BETA1,
    "revisionHistoryLimit": V1BETA1,
    "progressDeadlineSeconds": V1BETA1,
    "minReadySeconds": V1BETA1,
    "deletePolicy": V1BETA1,
    "machineNamingStrategy": V1BETA1,
    "rollout": V1BETA2,
    "deletion": V1BETA2,
    "machineNaming": V1BETA2,
}
_MACHINE_SPEC_MARKERS: dict[str, str] = {
    "nodeDrainTimeout": V1BETA1,
    "nodeVolumeDetachTimeout": V1BETA1,
    "nodeDeletionTimeout": V1BETA1,
    "nodeDrainTimeoutSeconds": V1BETA2,
    "nodeVolumeDetachTimeoutSeconds": V1BETA2,
    "nodeDeletionTimeoutSeconds": V1BETA2,
}
_STATUS_MARKERS: dict[str, str] = {
    "v1beta2": V1BETA1,
    "infrastructureReady": V1BETA1,
    "bootstrapReady": V1BETA1,
    "updatedReplicas": V1BETA1,
    "unavailableReplicas": V1BETA1,
    "fullyLabeledReplicas": V1BETA1,
    "failureReason": V1BETA1,
    "failureMessage": V1BETA1,
    "deprecated": V1BETA2,
    "initialization": V1BETA2,
    "upToDateReplicas": V1BETA2,
}


def _ref_shape(ref: Any) -> str | None:
    if not isinstance(ref, Mapping):
        return None
    if ref.get("apiGroup"):
        return V1BETA2
    if ref.get("apiVersion"):
        return V1BETA1
    return None


def _machine_spec_shape(spec: Any) -> str | None:
    if not isinstance(spec, Mapping):
        return None
    for field, shape in _MACHINE_SPEC_MARKERS.items():
        if field in spec:
            return shape
    return _ref_shape(spec.get("infrastructureRef")) or _ref_shape(
        nested(spec, "bootstrap", "configRef")
    )


def _spec_shape(obj: Mapping[str, Any]) -> str | None:
    """The layout the spec's fields tell: a scalable resource's own, else its Machine
    template's; a Machine's spec."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return None
    if obj.get("kind") == "Machine":
        return _machine_spec_shape(spec)
    for field, shape in _SCALABLE_SPEC_MARKERS.items():
        if field in spec:
            return shape
    return _machine_spec_shape(nested(spec, "template", "spec"))


def shape_of(obj: Mapping[str, Any], default: str) -> str:
    """``v1beta1`` or ``v1beta2``: the layout ``obj`` is written in (see the module doc)."""
    group, _, version = str(obj.get("apiVersion") or "").rpartition("/")
    if group == CAPI_GROUP and version in SHAPES:
        return version  # the server converts: what is read is in the version read
    declared = annotations_of(obj).get(ANNOTATION_SHAPE, "").strip()
    if declared in SHAPES:
        return declared
    found = _spec_shape(obj)
    if found:
        return found
    status = obj.get("status")
    if isinstance(status, Mapping):
        for field, shape in _STATUS_MARKERS.items():
            if field in status:
                return shape
    return default


# --- reading settings from where each layout keeps them ----------------------------------------


@dataclass(frozen=True)
class Strategy:
    type: str
    max_surge: int | str | None
    max_unavailable: int | str | None


def rollout_strategy(md: Mapping[str, Any], shape: str) -> Strategy:
    """A MachineDeployment's rollout strategy; the other layout's field is read if the
    object's own is absent (an object may be half-converted by hand)."""
    places = [("strategy",), ("rollout", "strategy")]
    if shape == V1BETA2:
        places.reverse()
    for path in places:
        strategy = nested(md, "spec", *path)
        if isinstance(strategy, Mapping):
            rolling = strategy.get("rollingUpdate")
            rolling = rolling if isinstance(rolling, Mapping) else {}
            return Strategy(
                type=str(strategy.get("type") or "RollingUpdate"),
                max_surge=rolling.get("maxSurge"),
                max_unavailable=rolling.get("maxUnavailable"),
            )
    return Strategy("RollingUpdate", None, None)


def md_deletion_order(md: Mapping[str, Any], shape: str) -> str:
    """``Random``/``Newest``/``Oldest`` (or ``""`` for the default) of a MachineDeployment."""
    v1 = nested(md, "spec", "strategy", "rollingUpdate", "deletePolicy")
    v2 = nested(md, "spec", "deletion", "order")
    first, second = (v2, v1) if shape == V1BETA2 else (v1, v2)
    return str(first or second or "")


def ms_deletion_order(ms: Mapping[str, Any], shape: str) -> str:
    v1 = nested(ms, "spec", "deletePolicy")
    v2 = nested(ms, "spec", "deletion", "order")
    first, second = (v2, v1) if shape == V1BETA2 else (v1, v2)
    return str(first or second or "")


def ms_deletion_order_spec(order: str, shape: str) -> JsonObject:
    """The MachineSet ``spec`` fragment that carries ``order`` in ``shape``."""
    if shape == V1BETA2:
        return {"deletion": {"order": order or None}}
    return {"deletePolicy": order or None}


def revision_history_limit(md: Mapping[str, Any], shape: str) -> int:
    """Old MachineSets kept after a rollout: v1beta1's ``spec.revisionHistoryLimit`` (default
    1); v1beta2 dropped the field and keeps none."""
    if shape == V1BETA2:
        return 0
    limit = nested(md, "spec", "revisionHistoryLimit")
    return limit if isinstance(limit, int) and limit >= 0 else 1


# --- references ---------------------------------------------------------------------------------


def clone_ref(template_ref: Any, name: str, namespace: str, shape: str) -> JsonObject | None:
    """The reference a Machine gets to the object CAPI clones from a template reference:
    ``FooTemplate`` becomes ``Foo`` named like the Machine (the emulation creates no such
    object; see docs/capi-emulation.md)."""
    if not isinstance(template_ref, Mapping) or not template_ref.get("kind"):
        return None
    kind = str(template_ref["kind"])
    kind = kind.removesuffix("Template")
    api_group = template_ref.get("apiGroup")
    api_version = template_ref.get("apiVersion")
    if not api_group and isinstance(api_version, str):
        api_group = api_version.rpartition("/")[0]
    if shape == V1BETA2:
        return {"apiGroup": api_group or "", "kind": kind, "name": name}
    ref: JsonObject = {"kind": kind, "name": name, "namespace": namespace}
    ref["apiVersion"] = api_version or (f"{api_group}/v1beta1" if api_group else "")
    return ref


def node_ref(node: Mapping[str, Any], shape: str) -> JsonObject:
    meta = node.get("metadata") or {}
    if shape == V1BETA2:
        return {"name": meta.get("name", "")}
    return node_object_ref(node)


def node_object_ref(node: Mapping[str, Any]) -> JsonObject:
    """The ``corev1.ObjectReference`` MachinePools list in ``status.nodeRefs`` (both layouts)."""
    meta = node.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "name": meta.get("name", ""),
        "uid": meta.get("uid"),
    }


# --- conditions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str = ""
    message: str = ""
    severity: str = ""  # v1beta1 only: Error | Warning | Info when not True


def merge_conditions(
    existing: Any, wanted: Sequence[Condition], now: str, *, v1beta1: bool
) -> list[JsonObject]:
    """``existing`` with ``wanted`` set: other controllers' conditions are kept, a condition
    whose status does not change keeps its ``lastTransitionTime`` (so a repeated reconcile
    writes nothing)."""
    current = (
        [dict(c) for c in existing if isinstance(c, Mapping)] if isinstance(existing, list) else []
    )
    by_type = {str(c.get("type")): i for i, c in enumerate(current)}
    for condition in wanted:
        entry: JsonObject = {"type": condition.type, "status": condition.status}
        if condition.reason:
            entry["reason"] = condition.reason
        if condition.message:
            entry["message"] = condition.message
        if v1beta1 and condition.severity and condition.status != "True":
            entry["severity"] = condition.severity
        index = by_type.get(condition.type)
        old = current[index] if index is not None else None
        same_status = old is not None and old.get("status") == condition.status
        entry["lastTransitionTime"] = (
            old.get("lastTransitionTime", now) if same_status and old is not None else now
        )
        if index is None:
            by_type[condition.type] = len(current)
            current.append(entry)
        else:
            current[index] = entry
    return current


def _conditions_in(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found: list[Mapping[str, Any]] = []
    for path in (
        ("status", "conditions"),
        ("status", "v1beta2", "conditions"),
        ("status", "deprecated", "v1beta1", "conditions"),
    ):
        value = nested(obj, *path)
        if isinstance(value, list):
            found.extend(c for c in value if isinstance(c, Mapping))
    return found


def condition_status(obj: Mapping[str, Any], condition_type: str) -> str | None:
    """The status of ``condition_type`` wherever either layout keeps conditions; a ``False``
    anywhere wins, as both layouts describe the same object."""
    statuses = [
        str(c.get("status")) for c in _conditions_in(obj) if c.get("type") == condition_type
    ]
    if not statuses:
        return None
    return "False" if "False" in statuses else statuses[0]


def failure_of(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(failureReason, failureMessage)`` from either layout's place, if the object failed."""
    for base in (("status",), ("status", "deprecated", "v1beta1")):
        reason = nested(obj, *base, "failureReason")
        message = nested(obj, *base, "failureMessage")
        if reason or message:
            return str(reason or ""), str(message or "")
    return None


def replica_status(
    shape: str,
    *,
    replicas: int,
    ready: int,
    available: int,
    up_to_date: int,
    selector: str,
    generation: Any,
    legacy: Mapping[str, Any],
) -> JsonObject:
    """A MachineSet's or MachineDeployment's counters where a client of ``shape`` reads them.

    ``legacy`` are the counters only v1beta1 has (``fullyLabeledReplicas``, ``updatedReplicas``,
    ...): at the top of ``status`` in that layout, under ``status.deprecated.v1beta1`` (with
    the ready and available counts) in v1beta2, which moves the up-to-date count the other way.
    """
    status: JsonObject = {
        "selector": selector,
        "replicas": replicas,
        "readyReplicas": ready,
        "availableReplicas": available,
    }
    if isinstance(generation, int):
        status["observedGeneration"] = generation
    if shape == V1BETA2:
        status["upToDateReplicas"] = up_to_date
        status["deprecated"] = {
            "v1beta1": {**legacy, "readyReplicas": ready, "availableReplicas": available}
        }
    else:
        status.update(legacy)
        status["v1beta2"] = {
            "readyReplicas": ready,
            "availableReplicas": available,
            "upToDateReplicas": up_to_date,
        }
    return status
