"""Cluster API scalable resources as Karpenter instance types and offerings.

A ClusterAPINodeClass selects MachineDeployments, MachineSets and MachinePools (each opted in
with ``node.cluster.x-k8s.io/karpenter-member``). Resources that make the same node shape under
the same instance-type name, differing only in zone or capacity type, are one instance type with
several offerings: that is how Karpenter reasons about "the same machine in another zone", and
it lets the solver pick the cheapest zone instead of the first name in sort order.

A resource that cannot be described (malformed or missing annotations, paused) is left out and
reported as a ``ResourceProblem``; the others still make the inventory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.instancetype import InstanceType, InstanceTypeOverhead, Offering
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.discovery import CapiResources
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.core.kube.selectors import selector_to_string
from karpenter_capi.core.scheduling.resources import ResourceList
from karpenter_capi.plugins.generic_capi.shape import NodeShape, ShapeError, shape_from_annotations

# Labels CAPI copies from a Machine template onto the Node (the rest stay on the Machine).
_PROPAGATED_DOMAINS: Final = (
    "node.cluster.x-k8s.io",
    "node-role.kubernetes.io",
    "node-restriction.kubernetes.io",
)
_MIB: Final = 1024 * 1024
# (from millicores, to millicores, share reserved): the GKE/EKS kube-reserved CPU schedule.
_CPU_RESERVATION_STEPS: Final = (
    (0, 1000, 0.06),
    (1000, 2000, 0.01),
    (2000, 4000, 0.005),
    (4000, None, 0.0025),
)


@dataclass(frozen=True)
class ResourceProblem:
    """Why one scalable resource is not part of the inventory."""

    kind: str
    namespace: str
    name: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}: {self.message}"


@dataclass(frozen=True)
class ScalableResource:
    """A selected MachineDeployment, MachineSet or MachinePool and the offering it makes."""

    resource: Resource
    namespace: str
    name: str
    instance_type: str
    shape: NodeShape
    labels: Mapping[str, str]
    zone: str
    capacity_type: str
    replicas: int
    max_size: int | None

    @property
    def available(self) -> bool:
        return self.max_size is None or self.replicas < self.max_size


@dataclass
class Inventory:
    instance_types: list[InstanceType] = field(default_factory=list)
    resources: list[ScalableResource] = field(default_factory=list)
    problems: list[ResourceProblem] = field(default_factory=list)


def default_overhead(capacity: ResourceList) -> InstanceTypeOverhead:
    """kube-reserved as the managed clouds size it, plus a 100Mi hard eviction threshold.

    CPU: 6% of the first core, 1% of the second, 0.5% of the next two, 0.25% of the rest.
    Memory: 255Mi + 11Mi per pod the node can hold.
    """
    millis = capacity.milli("cpu") if "cpu" in capacity else 0
    reserved_cpu = sum(
        (min(millis, upper if upper is not None else millis) - lower) * share
        for lower, upper, share in _CPU_RESERVATION_STEPS
        if millis > lower
    )
    pods = capacity.value("pods") if "pods" in capacity else 110
    return InstanceTypeOverhead(
        kube_reserved=ResourceList.parse(
            {"cpu": f"{int(reserved_cpu)}m", "memory": str((255 + 11 * pods) * _MIB)}
        ),
        eviction_threshold=ResourceList.parse({"memory": "100Mi"}),
    )


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _template(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("spec") or {}).get("template") or {}


def _int_annotation(annotations: Mapping[str, str], key: str) -> int | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ShapeError(f"annotation {key}={raw!r}: not an integer") from None
    if value < 0:
        raise ShapeError(f"annotation {key}={raw!r}: must not be negative")
    return value


def describe_resource(resource: Resource, obj: Mapping[str, Any]) -> ScalableResource:
    """The offering one scalable resource makes; ``ShapeError`` when it cannot be described."""
    meta = _metadata(obj)
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    shape = shape_from_annotations(annotations)
    if shape is None:
        raise ShapeError(
            f"no node shape: set the {wellknown.ANNOTATION_CAPACITY_CPU} and "
            f"{wellknown.ANNOTATION_CAPACITY_MEMORY} annotations"
        )
    template = _template(obj)
    template_labels: Mapping[str, str] = (template.get("metadata") or {}).get("labels") or {}
    labels = {
        key: value
        for key, value in template_labels.items()
        if key.split("/", 1)[0].endswith(_PROPAGATED_DOMAINS) and "/" in key
    }
    labels.update(shape.labels)
    instance_type = (
        shape.labels.get(wellknown.LABEL_INSTANCE_TYPE)
        or template_labels.get(wellknown.LABEL_INSTANCE_TYPE)
        or _shape_name(shape)
    )
    zone = (
        (template.get("spec") or {}).get("failureDomain")
        # A MachinePool lists its failure domains; an empty or null list names none.
        or ((obj.get("spec") or {}).get("failureDomains") or [None])[0]
        or labels.get(wellknown.LABEL_TOPOLOGY_ZONE)
        or ""
    )
    capacity_type = labels.pop(wellknown.LABEL_CAPACITY_TYPE, wellknown.CAPACITY_TYPE_ON_DEMAND)
    if capacity_type not in wellknown.CAPACITY_TYPES:
        raise ShapeError(
            f"label {wellknown.LABEL_CAPACITY_TYPE}={capacity_type!r} is not one of "
            f"{', '.join(wellknown.CAPACITY_TYPES)}"
        )
    labels.pop(wellknown.LABEL_TOPOLOGY_ZONE, None)
    labels.pop(wellknown.LABEL_INSTANCE_TYPE, None)
    replicas = (obj.get("spec") or {}).get("replicas")
    return ScalableResource(
        resource=resource,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        instance_type=str(instance_type),
        shape=shape,
        labels=labels,
        zone=str(zone),
        capacity_type=str(capacity_type),
        # CAPI defaults an unset spec.replicas to 1 (as capi_views does).
        replicas=int(replicas) if replicas is not None else 1,
        max_size=_int_annotation(annotations, wellknown.ANNOTATION_AUTOSCALER_MAX_SIZE),
    )


def _shape_name(shape: NodeShape) -> str:
    cpu = shape.capacity.milli("cpu") // 1000
    memory = shape.capacity.value("memory") // (1024 * _MIB)
    arch = shape.labels.get(wellknown.LABEL_ARCH, "amd64")
    return f"capi-{cpu}cpu-{memory}gib-{arch}"


def _owned_by_machine_deployment(obj: Mapping[str, Any]) -> bool:
    return any(
        ref.get("kind") == "MachineDeployment"
        for ref in _metadata(obj).get("ownerReferences") or []
    )


def select_resources(
    client: KubeClient, capi: CapiResources, selector: Mapping[str, Any] | None
) -> list[tuple[Resource, dict[str, Any]]]:
    """Opted-in scalable resources matching a NodeClass selector, filtered by the server."""
    label_selector = ",".join(
        filter(None, (selector_to_string(selector), wellknown.LABEL_KARPENTER_MEMBER))
    )
    found: list[tuple[Resource, dict[str, Any]]] = []
    for resource in (capi.machine_deployments, capi.machine_sets, capi.machine_pools):
        for obj in client.list(resource, label_selector=label_selector).items:
            if resource is capi.machine_sets and _owned_by_machine_deployment(obj):
                continue
            found.append((resource, obj))
    return found


def build_inventory(selected: Iterable[tuple[Resource, Mapping[str, Any]]]) -> Inventory:
    """Group the selected resources into instance types with one offering per resource."""
    inventory = Inventory()
    for resource, obj in selected:
        meta = _metadata(obj)
        annotations = meta.get("annotations") or {}
        problem_base = (resource.kind, str(meta.get("namespace") or ""), str(meta.get("name")))
        if wellknown.ANNOTATION_CAPI_PAUSED in annotations:
            inventory.problems.append(
                ResourceProblem(*problem_base, "Paused", "paused (cluster.x-k8s.io/paused)")
            )
            continue
        try:
            inventory.resources.append(describe_resource(resource, obj))
        except (ShapeError, ValueError) as exc:
            inventory.problems.append(ResourceProblem(*problem_base, "InvalidShape", str(exc)))
    groups: dict[str, list[ScalableResource]] = {}
    for scalable in inventory.resources:
        groups.setdefault(scalable.instance_type, []).append(scalable)
    for name, members in sorted(groups.items()):
        first = members[0]
        consistent = [first]
        for other in members[1:]:
            if (other.shape.capacity, other.shape.taints, other.labels) != (
                first.shape.capacity,
                first.shape.taints,
                first.labels,
            ):
                inventory.problems.append(
                    ResourceProblem(
                        other.resource.kind,
                        other.namespace,
                        other.name,
                        "ShapeMismatch",
                        f"instance type {name} is described differently by "
                        f"{first.resource.kind} {first.namespace}/{first.name}; left out",
                    )
                )
                continue
            consistent.append(other)
        inventory.instance_types.append(_instance_type(name, consistent))
    return inventory


def _instance_type(name: str, members: Sequence[ScalableResource]) -> InstanceType:
    first = members[0]
    requirements: dict[str, set[str]] = {key: {value} for key, value in first.labels.items()}
    requirements.setdefault(wellknown.LABEL_ARCH, {"amd64"})
    requirements.setdefault(wellknown.LABEL_OS, {"linux"})
    offerings = tuple(
        Offering(
            zone=member.zone,
            capacity_type=member.capacity_type,
            price=member.shape.price if member.shape.price is not None else 0.0,
            available=member.available,
        )
        for member in members
    )
    return InstanceType(
        name=name,
        capacity=first.shape.capacity,
        offerings=offerings,
        requirements={key: frozenset(values) for key, values in requirements.items()},
        overhead=default_overhead(first.shape.capacity),
        taints=first.shape.taints,
    )
