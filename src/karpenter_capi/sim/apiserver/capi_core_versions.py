"""Cluster API's core kinds at v1beta1 and v1beta2: the conversion webhook between them.

A real management cluster stores ``Machine``, ``MachineSet``, ``MachineDeployment`` and
``MachinePool`` at v1beta2 and converts every read, watch and write at v1beta1 through CAPI's
conversion webhook. Several fields the autoprovisioner and the emulation read or write sit in
different places in the two versions, so a client that reads one version after another client
wrote the other must find them where its own version keeps them; storing objects as written
(strategy ``None``) would hide exactly the mistakes a real cluster exposes. This module converts
the fields that moved, as upstream does:

- references: v1beta1 ``{apiVersion, kind, name, namespace}`` -> v1beta2 ``{apiGroup, kind,
  name}``; back, ``apiVersion`` is the referenced kind's served version (upstream asks the
  kind's CRD for its contract version; here its preferred served version);
- Machine spec timeouts: ``nodeDrainTimeout`` (a duration) ->
  ``deletion.nodeDrainTimeoutSeconds`` (and the volume-detach and deletion timeouts);
- MachineDeployment ``strategy`` -> ``rollout.strategy``, ``deletion.order``,
  ``remediation.maxInFlight``; ``rolloutAfter`` -> ``rollout.after``; MachineSet
  ``deletePolicy`` -> ``deletion.order``; ``machineNamingStrategy`` -> ``machineNaming``;
  ``minReadySeconds`` -> ``template.spec.minReadySeconds``;
- status: v1beta1's ``conditions`` and replica counters (``readyReplicas``,
  ``availableReplicas``, ``updatedReplicas``, ``unavailableReplicas``, ``fullyLabeledReplicas``)
  and ``failureReason``/``failureMessage`` <-> v1beta2's ``status.deprecated.v1beta1``;
  v1beta1's ``status.v1beta2`` (conditions, ``readyReplicas``, ``availableReplicas``,
  ``upToDateReplicas``) <-> v1beta2's top-level fields; ``bootstrapReady``/
  ``infrastructureReady`` <-> ``initialization.{bootstrapDataSecretCreated,
  infrastructureProvisioned}``; a Machine's ``nodeRef`` keeps only its name at v1beta2 (phase
  ``Updating`` reads as ``Running`` at v1beta1).

Labels and annotations (the scale-from-zero capacity annotations, ``delete-machine``),
``spec.replicas``, ``clusterName``, ``providerID``, ``providerIDList`` and the template's
labels are the same in both versions and carried as is.

Upstream: cluster-api api/core/v1beta1/conversion.go (``Convert_v1beta1_MachineSpec_To_v1beta2_
MachineSpec``, ``Convert_v1beta1_MachineDeploymentSpec_To_v1beta2_MachineDeploymentSpec``,
``Convert_v1beta1_MachineSetSpec_To_v1beta2_MachineSetSpec``, the ``*Status`` functions and
their reverses), core/webhooks/conversion/common.go (``convertToContractVersionedObjectReference``,
``convertToObjectReference``) and core/webhooks/conversion/{machine,machineset,
machinedeployment,machinepool}.go (``Convert*V1Beta1ToHub``/``Convert*HubToV1Beta1``).

What v1beta1 cannot hold survives a v1beta1 read and write as upstream keeps it: a Machine,
MachineDeployment or MachinePool read at v1beta1 carries the ``cluster.x-k8s.io/conversion-data``
annotation (the v1beta2 object without its metadata, as JSON: util/conversion/conversion.go
``MarshalDataUnsafeNoCopy``); written back at v1beta1, the annotation is taken off
(``UnmarshalData``) and the fields upstream restores from it are: a Machine's
``spec.minReadySeconds`` (v1beta1 has none), an explicit ``false`` of a Machine's or
MachinePool's ``status.initialization`` flags and of a MachineDeployment's ``spec.paused``
(``Convert_bool_To_Pointer_bool``: v1beta1's bools cannot tell false from unset), and a
Machine's phase ``Updating`` where v1beta1 shows ``Running`` (upstream restores the phase
whatever v1beta1 says, since only its v1beta2 controller writes it; the simulator's
controllers may run at v1beta1, so only the value v1beta1 cannot show is restored). A
MachineSet carries no annotation (upstream's ``ConvertMachineSetHubToV1Beta1`` writes none).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final

from karpenter_capi.core.api.duration import format_duration
from karpenter_capi.core.kube.errors import InternalError
from karpenter_capi.sim.apiserver.cel_values import parse_go_duration

JsonObject = dict[str, Any]

GROUP: Final = "cluster.x-k8s.io"
WEBHOOK_SERVICE: Final = ("capi-system", "capi-webhook-service")
KINDS: Final = frozenset({"Machine", "MachineSet", "MachineDeployment", "MachinePool"})
DATA_ANNOTATION: Final = "cluster.x-k8s.io/conversion-data"
_KEEP_DATA: Final = frozenset({"Machine", "MachineDeployment", "MachinePool"})

# (group, kind) -> the apiVersion a v1beta1 reference to that kind carries, or None.
VersionOf = Callable[[str, str], str | None]

_TIMEOUTS: Final = (
    ("nodeDrainTimeout", "nodeDrainTimeoutSeconds"),
    ("nodeVolumeDetachTimeout", "nodeVolumeDetachTimeoutSeconds"),
    ("nodeDeletionTimeout", "nodeDeletionTimeoutSeconds"),
)
# v1beta1 counters kept under status.deprecated.v1beta1 at v1beta2, by kind.
_LEGACY: Final[dict[str, tuple[str, ...]]] = {
    "MachineDeployment": (
        "availableReplicas",
        "unavailableReplicas",
        "updatedReplicas",
        "readyReplicas",
    ),
    "MachineSet": (
        "availableReplicas",
        "fullyLabeledReplicas",
        "readyReplicas",
        "failureReason",
        "failureMessage",
    ),
    "MachinePool": (
        "failureReason",
        "failureMessage",
        "readyReplicas",
        "availableReplicas",
        "unavailableReplicas",
    ),
    "Machine": ("failureReason", "failureMessage"),
}
_COUNTERS_ALWAYS_SHOWN: Final = frozenset({"MachineDeployment", "MachineSet"})
# v1beta2's new-semantics counters, kept under status.v1beta2 at v1beta1.
_NEW_COUNTERS: Final = ("readyReplicas", "availableReplicas", "upToDateReplicas")
_INITIALIZATION: Final = (
    ("bootstrapReady", "bootstrapDataSecretCreated"),
    ("infrastructureReady", "infrastructureProvisioned"),
)


def converter(version_of: VersionOf) -> Callable[[JsonObject, str], JsonObject]:
    """CAPI's core conversion webhook; ``version_of`` resolves a reference's apiVersion."""

    def convert(obj: JsonObject, api_version: str) -> JsonObject:
        source = str(obj.get("apiVersion") or "").rpartition("/")[2]
        target = api_version.rpartition("/")[2]
        obj["apiVersion"] = api_version
        kind = str(obj.get("kind") or "")
        if source == target or {source, target} != {"v1beta1", "v1beta2"} or kind not in KINDS:
            return obj
        if target == "v1beta2":
            restored = _unmarshal_data(obj)
            _spec_to_hub(kind, obj)
            _status_to_hub(kind, obj)
            _restore(kind, obj, restored)
        else:
            data = _marshal_data(obj) if kind in _KEEP_DATA else None
            _spec_from_hub(kind, obj, version_of)
            _status_from_hub(kind, obj)
            if data is not None:
                _dict(_dict(obj, "metadata"), "annotations")[DATA_ANNOTATION] = data
        return obj

    return convert


def _dict(parent: JsonObject, key: str) -> JsonObject:
    """``parent[key]`` as a dict, created if absent."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = {}
        parent[key] = value
    return value


def _prune(parent: JsonObject, *keys: str) -> None:
    """Drop the empty dicts at ``keys`` (omitempty: an empty struct is no field)."""
    for key in keys:
        if parent.get(key) in ({}, None):
            parent.pop(key, None)


def _machine_spec(kind: str, obj: JsonObject) -> JsonObject | None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return None
    if kind == "Machine":
        return spec
    found = (spec.get("template") or {}).get("spec")
    return found if isinstance(found, dict) else None


# --- conversion-data ----------------------------------------------------------------------------


def _marshal_data(hub: JsonObject) -> str:
    """``MarshalDataUnsafeNoCopy``: the v1beta2 object without its metadata, as JSON."""
    return json.dumps({k: v for k, v in hub.items() if k != "metadata"}, separators=(",", ":"))


def _unmarshal_data(obj: JsonObject) -> JsonObject | None:
    """``UnmarshalData``: the object the annotation holds (None: no annotation), which is
    taken off ``obj``."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return None
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict) or DATA_ANNOTATION not in annotations:
        return None
    data = annotations.pop(DATA_ANNOTATION)
    if not annotations:
        meta.pop("annotations")
    try:
        restored = json.loads(str(data))
    except ValueError as error:
        raise InternalError(
            "conversion webhook for cluster.x-k8s.io/v1beta1 failed: failed to convert object: "
            f"{error}"
        ) from None
    return restored if isinstance(restored, dict) else {}


def _restore_flag(parent: JsonObject, key: str, restored: Any) -> None:
    """``Convert_bool_To_Pointer_bool`` for a false (or unset) v1beta1 bool: false only when
    the v1beta2 object said false."""
    if parent.get(key) is True:
        return
    if isinstance(restored, dict) and restored.get(key) is False:
        parent[key] = False
    else:
        parent.pop(key, None)


def _restore(kind: str, obj: JsonObject, restored: JsonObject | None) -> None:
    """What upstream's ``Convert*V1Beta1ToHub`` takes back from the annotation."""
    if kind == "MachineSet":
        return
    old_spec = (restored or {}).get("spec") or {}
    old_status = (restored or {}).get("status") or {}
    if kind == "MachineDeployment":
        spec = obj.get("spec")
        if isinstance(spec, dict):
            _restore_flag(spec, "paused", old_spec)
        return
    status = obj.get("status")
    if isinstance(status, dict):
        initialization = _dict(status, "initialization")
        for _, new in _INITIALIZATION:
            _restore_flag(initialization, new, old_status.get("initialization"))
        _prune(status, "initialization")
        if status.get("phase") == "Running" and old_status.get("phase") == "Updating":
            status["phase"] = "Updating"
    if kind == "Machine" and restored is not None and isinstance(obj.get("spec"), dict):
        if old_spec.get("minReadySeconds") is not None:
            obj["spec"]["minReadySeconds"] = old_spec["minReadySeconds"]
        else:
            obj["spec"].pop("minReadySeconds", None)


# --- v1beta1 -> v1beta2 -------------------------------------------------------------------------


def _ref_to_hub(ref: Any) -> Any:
    if not isinstance(ref, dict):
        return ref
    converted: JsonObject = {
        "apiGroup": str(ref.get("apiVersion") or "").rpartition("/")[0],
        "kind": ref.get("kind", ""),
        "name": ref.get("name", ""),
    }
    return {k: v for k, v in converted.items() if v}


def _seconds(duration: Any) -> Any:
    if not isinstance(duration, str):
        return duration
    parsed = parse_go_duration(duration)
    return duration if parsed is None else min(int(parsed.total_seconds()), 2**31 - 1)


def _machine_spec_to_hub(spec: JsonObject) -> None:
    if "infrastructureRef" in spec:
        spec["infrastructureRef"] = _ref_to_hub(spec["infrastructureRef"])
    bootstrap = spec.get("bootstrap")
    if isinstance(bootstrap, dict) and "configRef" in bootstrap:
        bootstrap["configRef"] = _ref_to_hub(bootstrap["configRef"])
        _prune(bootstrap, "configRef")
    deletion = _dict(spec, "deletion")
    for old, new in _TIMEOUTS:
        if old in spec:
            deletion[new] = _seconds(spec.pop(old))
    _prune(spec, "deletion")


def _spec_to_hub(kind: str, obj: JsonObject) -> None:
    machine = _machine_spec(kind, obj)
    if machine is not None:
        _machine_spec_to_hub(machine)
    spec = obj.get("spec")
    if kind == "Machine" or not isinstance(spec, dict):
        return
    _group_spec_to_hub(kind, spec, machine)
    if kind == "MachineDeployment":
        _deployment_spec_to_hub(spec)


def _group_spec_to_hub(kind: str, spec: JsonObject, machine: JsonObject | None) -> None:
    """What a MachineSet, MachineDeployment and MachinePool share: min ready seconds move into
    the template, the naming strategy is renamed, a MachineSet's delete policy is an order."""
    min_ready = spec.pop("minReadySeconds", None)
    if min_ready and machine is not None:
        machine["minReadySeconds"] = min_ready
    naming = spec.pop("machineNamingStrategy", None)
    if isinstance(naming, dict) and naming.get("template"):
        spec["machineNaming"] = {"template": naming["template"]}
    if kind == "MachineSet" and "deletePolicy" in spec:
        policy = spec.pop("deletePolicy")
        if policy:
            _dict(spec, "deletion")["order"] = policy


def _deployment_spec_to_hub(spec: JsonObject) -> None:
    """A MachineDeployment's strategy and rolloutAfter become ``rollout``; its delete policy
    and remediation move out of the strategy."""
    spec.pop("progressDeadlineSeconds", None)
    spec.pop("revisionHistoryLimit", None)  # not in v1beta2: upstream drops it too
    strategy = spec.pop("strategy", None)
    rollout = _dict(spec, "rollout")
    if isinstance(strategy, dict):
        _strategy_to_hub(spec, strategy, rollout)
    after = spec.pop("rolloutAfter", None)
    if after:
        rollout["after"] = after
    _prune(spec, "rollout")


def _strategy_to_hub(spec: JsonObject, strategy: JsonObject, rollout: JsonObject) -> None:
    """The strategy's type and surge go to ``rollout``, its delete policy to the deletion
    order, its remediation's max in flight to ``remediation``."""
    rolling = strategy.get("rollingUpdate") or {}
    wanted: JsonObject = {"type": strategy.get("type")} if strategy.get("type") else {}
    surge = {k: rolling[k] for k in ("maxUnavailable", "maxSurge") if k in rolling}
    if surge:
        wanted["rollingUpdate"] = surge
    if wanted:
        rollout["strategy"] = wanted
    if rolling.get("deletePolicy"):
        _dict(spec, "deletion")["order"] = rolling["deletePolicy"]
    in_flight = (strategy.get("remediation") or {}).get("maxInFlight")
    if in_flight is not None:
        _dict(spec, "remediation")["maxInFlight"] = in_flight


def _status_to_hub(kind: str, obj: JsonObject) -> None:
    status = obj.get("status")
    if not isinstance(status, dict):
        return
    legacy_conditions = status.pop("conditions", None)
    newer = status.pop("v1beta2", None)
    newer = newer if isinstance(newer, dict) else {}
    deprecated = _deprecated_to_hub(kind, status, legacy_conditions)
    if kind != "Machine":
        for field in _NEW_COUNTERS:
            if field in newer:
                status[field] = newer[field]
    if "conditions" in newer:
        status["conditions"] = newer["conditions"]
    if deprecated:
        status["deprecated"] = {"v1beta1": deprecated}
    if kind in ("Machine", "MachinePool"):
        _initialization_to_hub(status)
    if kind == "Machine" and isinstance(status.get("nodeRef"), dict):
        status["nodeRef"] = {"name": status["nodeRef"].get("name", "")}


def _deprecated_to_hub(kind: str, status: JsonObject, legacy_conditions: Any) -> JsonObject:
    """The v1beta1 conditions and counters, taken out of ``status`` for
    ``status.deprecated.v1beta1``."""
    deprecated: JsonObject = {}
    if legacy_conditions is not None:
        deprecated["conditions"] = legacy_conditions
    for field in _LEGACY[kind]:
        if field in status:
            deprecated[field] = status.pop(field)
    return deprecated


def _initialization_to_hub(status: JsonObject) -> None:
    """v1beta1's ready booleans become ``status.initialization`` (only those true)."""
    initialization: JsonObject = {}
    for old, new in _INITIALIZATION:
        if status.pop(old, False) is True:
            initialization[new] = True
    if initialization:
        status["initialization"] = initialization


# --- v1beta2 -> v1beta1 -------------------------------------------------------------------------


def _ref_from_hub(ref: Any, namespace: Any, version_of: VersionOf) -> Any:
    if not isinstance(ref, dict) or not ref.get("name"):
        return ref
    group, kind = str(ref.get("apiGroup") or ""), str(ref.get("kind") or "")
    api_version = version_of(group, kind)
    if api_version is None:
        raise InternalError(
            "conversion webhook for cluster.x-k8s.io/v1beta2 failed: failed to convert object: "
            f"failed to get apiVersion for {kind}.{group}: no CustomResourceDefinition serves it"
        )
    converted: JsonObject = {"apiVersion": api_version, "kind": kind, "name": ref["name"]}
    if namespace:
        converted["namespace"] = namespace
    return converted


def _machine_spec_from_hub(spec: JsonObject, namespace: Any, version_of: VersionOf) -> None:
    if "infrastructureRef" in spec:
        spec["infrastructureRef"] = _ref_from_hub(spec["infrastructureRef"], namespace, version_of)
    bootstrap = spec.get("bootstrap")
    if isinstance(bootstrap, dict) and "configRef" in bootstrap:
        bootstrap["configRef"] = _ref_from_hub(bootstrap["configRef"], namespace, version_of)
    deletion = spec.pop("deletion", None)
    if isinstance(deletion, dict):
        for old, new in _TIMEOUTS:
            seconds = deletion.get(new)
            if isinstance(seconds, int) and seconds >= 0:
                spec[old] = format_duration(timedelta(seconds=seconds))


def _spec_from_hub(kind: str, obj: JsonObject, version_of: VersionOf) -> None:
    namespace = (obj.get("metadata") or {}).get("namespace")
    machine = _machine_spec(kind, obj)
    min_ready = None if machine is None else machine.pop("minReadySeconds", None)
    if machine is not None:
        _machine_spec_from_hub(machine, namespace, version_of)
    spec = obj.get("spec")
    if kind == "Machine" or not isinstance(spec, dict):
        return
    _group_spec_from_hub(spec, min_ready)
    order = (spec.pop("deletion", None) or {}).get("order")
    if kind == "MachineSet":
        if order:
            spec["deletePolicy"] = order
        return
    if kind == "MachineDeployment":
        _deployment_spec_from_hub(spec, order)


def _group_spec_from_hub(spec: JsonObject, min_ready: Any) -> None:
    """What a MachineSet, MachineDeployment and MachinePool share: min ready seconds back
    from the template, the naming strategy renamed back."""
    if min_ready:
        spec["minReadySeconds"] = min_ready
    naming = spec.pop("machineNaming", None)
    if isinstance(naming, dict) and naming.get("template"):
        spec["machineNamingStrategy"] = {"template": naming["template"]}


def _deployment_spec_from_hub(spec: JsonObject, order: Any) -> None:
    """A MachineDeployment's ``rollout``, deletion order and remediation back into its
    v1beta1 strategy and rolloutAfter."""
    if spec.get("paused") is False:
        del spec["paused"]  # v1beta1's is a bool with omitempty
    rollout = spec.pop("rollout", None) or {}
    remediation = spec.pop("remediation", None) or {}
    wanted = rollout.get("strategy") or {}
    strategy: JsonObject = {}
    if wanted:
        strategy["type"] = wanted.get("type", "")
        rolling = wanted.get("rollingUpdate") or {}
        if rolling:
            strategy["rollingUpdate"] = dict(rolling)
    if order:
        _dict(strategy, "rollingUpdate")["deletePolicy"] = order
    if remediation.get("maxInFlight") is not None:
        strategy["remediation"] = {"maxInFlight": remediation["maxInFlight"]}
    if strategy:
        spec["strategy"] = {k: v for k, v in strategy.items() if v != ""}
    if rollout.get("after"):
        spec["rolloutAfter"] = rollout["after"]


def _status_from_hub(kind: str, obj: JsonObject) -> None:
    status = obj.get("status")
    if not isinstance(status, dict):
        return
    conditions = status.pop("conditions", None)
    counters = {f: status.pop(f) for f in _NEW_COUNTERS if f in status and kind != "Machine"}
    _deprecated_from_hub(kind, status)
    newer: JsonObject = dict(counters)
    if conditions is not None:
        newer["conditions"] = conditions
    if newer:
        status["v1beta2"] = newer
    if kind in ("Machine", "MachinePool"):
        initialization = status.pop("initialization", None) or {}
        for old, new in _INITIALIZATION:
            status[old] = initialization.get(new) is True
    if kind == "Machine":
        _machine_status_from_hub(status)


def _deprecated_from_hub(kind: str, status: JsonObject) -> None:
    """``status.deprecated.v1beta1`` back into v1beta1's conditions and counters."""
    deprecated = ((status.pop("deprecated", None) or {}).get("v1beta1")) or {}
    if deprecated.get("conditions") is not None:
        status["conditions"] = deprecated["conditions"]
    for field in _LEGACY[kind]:
        value = deprecated.get(field)
        if field.endswith("Replicas") and kind in _COUNTERS_ALWAYS_SHOWN:
            status[field] = value or 0  # v1beta1 has these without omitempty
        elif value not in (None, 0, ""):
            status[field] = value


def _machine_status_from_hub(status: JsonObject) -> None:
    """A Machine's phase and nodeRef as v1beta1 has them (no Updating phase; a full ref)."""
    if status.get("phase") == "Updating":
        status["phase"] = "Running"
    node = status.get("nodeRef")
    if isinstance(node, dict) and node.get("name"):
        status["nodeRef"] = {"apiVersion": "v1", "kind": "Node", "name": node["name"]}
