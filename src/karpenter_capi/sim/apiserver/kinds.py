"""Per-kind rules kube-apiserver applies on create and update (its "strategies").

A real API server is not a generic document store: a new pod starts ``Pending`` with a QoS
class, a namespace starts ``Active``, a custom resource with a status subresource drops the
status a client sent on create, and a pod update cannot bind, move or unbind the pod. The
simulation and the controllers rely on those rules, so they are reproduced here, kept to what
matters.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.messages import FieldError, forbidden_field

JsonObject = dict[str, Any]

# ``ValidatePodUpdate``'s Forbidden detail: ``updatablePodSpecFields`` joined by commas
# (``pkg/apis/core/validation/validation.go``). kube appends a go-cmp diff of the spec after a
# newline; it is not reproduced.
_POD_UPDATE_RULE = "pod updates may not change fields other than " + ",".join(
    (
        "`spec.containers[*].image`",
        "`spec.initContainers[*].image`",
        "`spec.activeDeadlineSeconds`",
        "`spec.tolerations` (only additions to existing tolerations)",
        "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously "
        "negative)",
    )
)
# Kinds whose create keeps the status the client sent (kube: "nodes allow all fields").
_STATUS_KEPT_ON_CREATE = frozenset({"nodes"})
# Built-in kinds whose kube strategy sets and bumps metadata.generation (kube 1.31); the others
# (ConfigMap, Pod, Node, Namespace, Service...) leave it unset.
_GENERATION_TRACKED = frozenset(
    {
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("policy", "poddisruptionbudgets"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
    }
)
# ObjectMeta's fields: any other key under metadata is unknown (fieldValidation).
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
_EMPTY_STATUS_ON_CREATE: dict[str, JsonObject] = {
    "services": {"loadBalancer": {}},
    "persistentvolumeclaims": {"phase": "Pending"},
    "persistentvolumes": {"phase": "Pending"},
}


def _resources_of(container: JsonObject) -> tuple[JsonObject, JsonObject]:
    resources = container.get("resources") or {}
    return dict(resources.get("requests") or {}), dict(resources.get("limits") or {})


def qos_class(spec: JsonObject) -> str:
    """The pod's QoS class as the kubelet computes it from cpu/memory requests and limits."""
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for container in containers:
        requests, limits = _resources_of(container)
        for resource in ("cpu", "memory"):
            request, limit = requests.get(resource), limits.get(resource)
            if request is not None or limit is not None:
                any_set = True
            if limit is None or (request is not None and str(request) != str(limit)):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def prepare_create(
    definition: ResourceDefinition, obj: JsonObject, priority_of: dict[str, int]
) -> None:
    """Reset and default what the server owns on create (status, pod defaults)."""
    plural = definition.plural
    if definition.group == "" and plural == "pods":
        spec = obj.setdefault("spec", {})
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        class_name = spec.get("priorityClassName")
        if "priority" not in spec:
            spec["priority"] = priority_of.get(str(class_name), 0) if class_name else 0
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}
        return
    if definition.group == "" and plural == "namespaces":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
        return
    if definition.group == "apps" and plural in ("deployments", "replicasets", "statefulsets"):
        obj.setdefault("spec", {}).setdefault("replicas", 1)
    if not definition.has_status or (definition.group == "" and plural in _STATUS_KEPT_ON_CREATE):
        return
    if definition.custom:
        obj.pop("status", None)
    else:
        obj["status"] = dict(_EMPTY_STATUS_ON_CREATE.get(plural, {}))


def tracks_generation(definition: ResourceDefinition) -> bool:
    """Whether kube keeps ``metadata.generation`` for the kind (1 on create, then counted)."""
    return definition.custom or (definition.group, definition.plural) in _GENERATION_TRACKED


def generation_changed(definition: ResourceDefinition, old: JsonObject, new: JsonObject) -> bool:
    """Whether a write bumps ``metadata.generation``, per kube's strategy for the kind.

    Custom resources count every change outside ``metadata`` (and outside ``status`` when the
    status subresource is enabled); the built-in kinds that track generation count ``spec``,
    and Deployments their annotations too (they are copied to the ReplicaSets).
    """
    if definition.custom:
        ignored = {"metadata", "apiVersion", "kind"}
        if definition.has_status:
            ignored.add("status")
        keys = (set(old) | set(new)) - ignored
        return any(old.get(key) != new.get(key) for key in keys)
    if not tracks_generation(definition):
        return False
    if old.get("spec") != new.get("spec"):
        return True
    if definition.group == "apps" and definition.plural == "deployments":
        before = (old.get("metadata") or {}).get("annotations") or {}
        after = (new.get("metadata") or {}).get("annotations") or {}
        return bool(before != after)
    return False


def validate_update(
    definition: ResourceDefinition, old: JsonObject, new: JsonObject
) -> list[FieldError]:
    """Immutability rules enforced on update (kept modest: the ones controllers can trip).

    A pod's ``spec.nodeName`` may not be set, changed or cleared (``ValidatePodUpdate``: it is
    none of the mutable fields); only ``pods/binding`` sets it. An empty name is no name, as
    in kube's Go types.
    """
    errors: list[FieldError] = []
    if definition.group == "" and definition.plural == "pods":
        before = (old.get("spec") or {}).get("nodeName") or ""
        after = (new.get("spec") or {}).get("nodeName") or ""
        if after != before:
            errors.append(forbidden_field("spec", _POD_UPDATE_RULE))
    if definition.group in ("apps",) and definition.plural in ("deployments", "replicasets"):
        before_selector = (old.get("spec") or {}).get("selector")
        after_selector = (new.get("spec") or {}).get("selector")
        if before_selector is not None and after_selector != before_selector:
            errors.append(
                FieldError(
                    "spec.selector",
                    "FieldValueInvalid",
                    f"Invalid value: {after_selector}: field is immutable",
                )
            )
    return errors
