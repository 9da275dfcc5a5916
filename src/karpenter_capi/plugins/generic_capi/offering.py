"""One selected scalable resource as the offering it makes: shape, zone, capacity type, price,
availability and overhead.

``describe_resource`` combines what ``shape`` resolves (capacity, labels, taints, price from
annotations, a native plugin's description and the template's status) with the resource's own
fields (failure domain, replicas, max size) and what was learned elsewhere (recent launch
failures, a kubeadm bootstrap config's kubelet settings, a real Node's overhead). Split from
``inventory``, which selects resources and groups them into instance types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from karpenter_capi.plugin_api import MachineTemplateDescription, Resource
from karpenter_capi.plugin_api.karpenter import wellknown
from karpenter_capi.plugins.generic_capi.kubelet import KubeletSettings
from karpenter_capi.plugins.generic_capi.overhead import (
    LearnedOverhead,
    ResolvedOverhead,
    resolve_overhead,
)
from karpenter_capi.plugins.generic_capi.selection import resource_key
from karpenter_capi.plugins.generic_capi.shape import (
    SOURCE_ANNOTATION,
    SOURCE_ESTIMATE,
    NodeShape,
    ShapeError,
    TemplateStatus,
    machine_taints,
    resolve_shape,
)
from karpenter_capi.plugins.generic_capi.shape_settings import ShapeSettings


class FailureMarks(Protocol):
    """Why a resource recently failed to produce a Machine (``sources.UnavailableOfferings``)."""

    def reason(self, key: str) -> str | None: ...


@dataclass(frozen=True)
class ScalableResource:
    """A selected MachineDeployment, MachineSet or MachinePool and the offering it makes.

    ``labels`` are the node labels except zone, capacity type and instance type (those are the
    offering's and the instance type's). ``price`` is the annotated price, the native plugin's
    price in the resource's zone, or the estimate when ``price_estimated``; ``price_source``
    says which (``annotation``, ``AWS``, ``estimate``). ``unavailable_reason`` says why the
    offering cannot be bought now.
    """

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
    price: float = 0.0
    price_estimated: bool = False
    unavailable_reason: str | None = None
    price_source: str = ""
    overhead: ResolvedOverhead | None = None
    """What its nodes keep for themselves, and how strong the source is (``overhead``)."""

    @property
    def kind(self) -> str:
        return self.resource.kind

    @property
    def key(self) -> str:
        return resource_key(self.resource.kind, self.namespace, self.name)

    @property
    def available(self) -> bool:
        return self.unavailable_reason is None


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def _template(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _spec(obj).get("template") or {}


def template_spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """A scalable resource's Machine template spec (``spec.template.spec``)."""
    spec = _template(obj).get("spec") or {}
    return spec if isinstance(spec, Mapping) else {}


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


def _zone(
    annotation_labels: Mapping[str, str],
    obj: Mapping[str, Any],
    template_labels: Mapping[str, str],
) -> str:
    """The zone label value the node will carry, best source first.

    The labels annotation states the Node label itself, so it wins over a failure domain,
    whose name need not be the zone label's value (Azure's failure domain ``1`` is zone
    ``eastus-1``). A MachinePool spread over several failure domains has no single zone.
    """
    declared = annotation_labels.get(wellknown.LABEL_TOPOLOGY_ZONE)
    if declared:
        return declared
    failure_domain = (_template(obj).get("spec") or {}).get("failureDomain")
    if failure_domain:
        return str(failure_domain)
    pool_domains = _spec(obj).get("failureDomains") or []
    if isinstance(pool_domains, list) and len(pool_domains) == 1 and pool_domains[0]:
        return str(pool_domains[0])
    return str(template_labels.get(wellknown.LABEL_TOPOLOGY_ZONE) or "")


def _shape_name(shape: NodeShape) -> str:
    cpu = shape.capacity.milli("cpu") // 1000
    memory = shape.capacity.value("memory") // (1024 * 1024 * 1024)
    arch = shape.labels.get(wellknown.LABEL_ARCH, "amd64")
    return f"capi-{cpu}cpu-{memory}gib-{arch}"


def _native_price(native: MachineTemplateDescription, zone: str) -> float | None:
    """The description's price in ``zone``; without a zone, the dearest known (the machine may
    land in any of them, and overestimating keeps the solver honest)."""
    if zone:
        return native.zones.get(zone)
    known = [price for price in native.zones.values() if price is not None]
    return max(known) if known else None


def _native_unavailable(
    native: MachineTemplateDescription, instance_type: str, zone: str, capacity_type: str
) -> str | None:
    if native.unavailable_reason:
        return f"{native.source}: {native.unavailable_reason}"
    if zone and zone not in native.zones:
        offered = ", ".join(sorted(native.zones)) or "no zone"
        return (
            f"{native.source}: {instance_type} is not offered as {capacity_type} in zone {zone} "
            f"(offered in {offered})"
        )
    return None


def _sizes(obj: Mapping[str, Any], annotations: Mapping[str, str]) -> tuple[int, int | None]:
    """The resource's replicas and autoscaler max size, checked against each other and its
    min size; ``ShapeError`` naming the field when they cannot go together."""
    raw_replicas = _spec(obj).get("replicas")
    try:
        # CAPI defaults an unset spec.replicas to 1 (as capi_views does).
        replicas = int(raw_replicas) if raw_replicas is not None else 1
    except (TypeError, ValueError):
        raise ShapeError(f"spec.replicas={raw_replicas!r}: not an integer") from None
    max_size = _int_annotation(annotations, wellknown.ANNOTATION_AUTOSCALER_MAX_SIZE)
    # Scale-down reads the min size leniently (scaling.min_size_of); a malformed one is still
    # the user's mistake to hear about, here where the resource is described.
    min_size = _int_annotation(annotations, wellknown.ANNOTATION_AUTOSCALER_MIN_SIZE)
    if max_size == 0 and replicas == 0:
        # Kept while it still has nodes (they are someone's), but it can never give another.
        raise ShapeError(
            f"annotation {wellknown.ANNOTATION_AUTOSCALER_MAX_SIZE}=0: it may never have a "
            "node; raise it, or take the resource out of the NodeClass's selection"
        )
    if min_size is not None and max_size is not None and min_size > max_size:
        raise ShapeError(
            f"annotation {wellknown.ANNOTATION_AUTOSCALER_MIN_SIZE}={min_size} is above "
            f"{wellknown.ANNOTATION_AUTOSCALER_MAX_SIZE}={max_size}"
        )
    return replicas, max_size


def describe_resource(
    resource: Resource,
    obj: Mapping[str, Any],
    *,
    template: TemplateStatus | None = None,
    native: MachineTemplateDescription | None = None,
    settings: ShapeSettings | None = None,
    unavailable: FailureMarks | None = None,
    kubelet: KubeletSettings | None = None,
    learned: LearnedOverhead | None = None,
) -> ScalableResource:
    """The offering one scalable resource makes.

    ``native`` is a native plugin's description of the resource's template: it ranks between
    the annotations and the template's status, gives the capacity type when no label does, and
    prices the offering in the resource's zone when no price annotation does. ``kubelet`` (the
    bootstrap config's settings) and ``learned`` (a real Node's) decide the overhead with the
    explicit settings and the native plugin's (``overhead.resolve_overhead``); ``kubelet``'s
    max-pods is the pods capacity unless annotated.

    Raises ``MissingShapeError`` when nothing gives CPU and memory, ``ShapeError`` when a value
    is malformed.
    """
    settings = settings or ShapeSettings()
    meta = _metadata(obj)
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    template_meta = _template(obj).get("metadata") or {}
    template_labels: Mapping[str, str] = template_meta.get("labels") or {}
    shape = resolve_shape(
        annotations,
        template=template,
        native=native,
        template_labels=template_labels,
        template_taints=machine_taints((_template(obj).get("spec") or {}).get("taints")),
        kubelet_max_pods=kubelet.max_pods if kubelet is not None else None,
    )
    labels = dict(shape.labels)
    declared = {
        key: value
        for key, value in labels.items()
        if key in (wellknown.LABEL_TOPOLOGY_ZONE, wellknown.LABEL_CAPACITY_TYPE)
    }
    instance_type = (
        labels.pop(wellknown.LABEL_INSTANCE_TYPE, None)
        or template_labels.get(wellknown.LABEL_INSTANCE_TYPE)
        or _shape_name(shape)
    )
    zone = _zone(declared, obj, template_labels)
    capacity_type = labels.pop(
        wellknown.LABEL_CAPACITY_TYPE,
        native.capacity_type if native is not None else wellknown.CAPACITY_TYPE_ON_DEMAND,
    )
    if capacity_type not in wellknown.CAPACITY_TYPES:
        raise ShapeError(
            f"label {wellknown.LABEL_CAPACITY_TYPE}={capacity_type!r} is not one of "
            f"{', '.join(wellknown.CAPACITY_TYPES)}"
        )
    labels.pop(wellknown.LABEL_TOPOLOGY_ZONE, None)
    replicas, max_size = _sizes(obj, annotations)
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    unavailable_reason = None
    if max_size is not None and replicas >= max_size:
        unavailable_reason = f"at its maximum size ({replicas} of {max_size} replicas)"
    elif native is not None and (
        missing := _native_unavailable(native, str(instance_type), zone, str(capacity_type))
    ):
        unavailable_reason = missing
    elif unavailable is not None:
        failed = unavailable.reason(resource_key(resource.kind, namespace, name))
        if failed is not None:
            unavailable_reason = f"recently failed to produce a Machine: {failed}"
    price, price_source = shape.price, SOURCE_ANNOTATION
    if price is None and native is not None:
        price, price_source = _native_price(native, zone), native.source
    if price is None:
        price_source = SOURCE_ESTIMATE
    return ScalableResource(
        resource=resource,
        namespace=namespace,
        name=name,
        instance_type=str(instance_type),
        shape=shape,
        labels=MappingProxyType(labels),
        zone=zone,
        capacity_type=str(capacity_type),
        replicas=replicas,
        max_size=max_size,
        price=price if price is not None else settings.rates.estimate(shape.capacity),
        price_estimated=price is None,
        unavailable_reason=unavailable_reason,
        price_source=price_source,
        overhead=resolve_overhead(
            shape.capacity,
            policy=settings.overhead,
            learned=learned,
            kubeadm_config=kubelet.components if kubelet is not None else None,
            native=native.overhead if native is not None else None,
        ),
    )
