"""The node a Cluster API scalable resource would make: capacity, labels, taints, price, overhead.

A MachineDeployment at zero replicas has no Node to look at, so the shape has to be declared.
Two declarations exist in the Cluster API world and both are read, in this precedence (the same
as cluster-autoscaler's Cluster API provider, which users already configure):

1. the scale-from-zero annotations on the scalable resource
   (``capacity.cluster-autoscaler.kubernetes.io/{cpu,memory,ephemeral-disk,maxPods,gpu-count,
   gpu-type,labels,taints}``), which a user writes and which therefore win;
2. a native plugin's description of the infrastructure template (``capa`` for an
   ``AWSMachineTemplate``, ``capz`` for an ``AzureMachineTemplate``: the
   ``MachineTemplateDescription`` of ``karpenter_capi_describe_machine_template``), which knows
   the cloud's real shape;
3. the infrastructure machine template's ``status.capacity`` and ``status.nodeInfo``
   (``architecture``, ``operatingSystem``), which an infrastructure provider fills in under the
   CAPI "opt-in autoscaling from zero" contract;
4. the taints of the Machine template (``spec.template.spec.taints``, CAPI v1beta2), and the
   Machine-template labels in the domains CAPI copies to the Node.

Capacity merges per resource (an annotation overrides that one resource of the template, as in
cluster-autoscaler), labels per key, taints per ``key:effect``.

Every value's origin is recorded (``SOURCE_ANNOTATION``, the native plugin's ``source`` such as
``AWS``, ``SOURCE_TEMPLATE_STATUS``, ``SOURCE_ESTIMATE``) so ``karpenter-capi instance-types``
can say where a shape or a price came from.

Prices: CAPI cannot know what a node costs, so ``karpenter.cluster.x-k8s.io/price`` says it, or
a native plugin knows it (per zone). Without either the price is *estimated* from the shape
(``shape_settings.PriceRates``) rather than taken as 0, which would make the unpriced resource
the cheapest and the solver would prefer the biggest unpriced node. The estimate uses on-demand
list rates per vCPU, GiB and GPU, so estimated and annotated prices sit on one scale and the
solver still prefers smaller nodes.

Overhead (kube-reserved, system-reserved, eviction threshold) is what the kubelet keeps for
itself: ``overhead`` resolves it; ``shape_settings.settings_from`` reads its explicit settings.
A kubeadm bootstrap config's ``max-pods`` (``kubelet``) is a capacity source of its own, between
the annotations and a native plugin's description.

Every value is checked: a malformed one raises ``ShapeError`` (or ``SettingsError``) naming the
annotation or field and the value, and the caller marks only that resource (or NodeClass)
unusable (design decision 9, "Bad input never stops the controller"). Nothing here does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from karpenter_capi.plugin_api import MachineTemplateDescription, ResourceList, parse_quantity
from karpenter_capi.plugin_api.karpenter import (
    QuantityError,
    Taint,
    TaintError,
    label_value_problems,
    qualified_name_problems,
    wellknown,
)
from karpenter_capi.plugins.generic_capi.overhead import (
    SOURCE_KUBEADM_CONFIG,
)

DEFAULT_MAX_PODS: Final = 110
DEFAULT_ARCH: Final = wellknown.ARCH_AMD64
DEFAULT_OS: Final = "linux"
PRICE_ANNOTATION: Final = "karpenter.cluster.x-k8s.io/price"
"""Hourly price of one node of the resource (USD, decimal); pricing plugins may override it."""

# Where a value came from (shown by ``karpenter-capi instance-types``); a native plugin's
# description names itself (``AWS``, ``Azure``).
SOURCE_ANNOTATION: Final = "annotation"
SOURCE_TEMPLATE_STATUS: Final = "template status"
SOURCE_ESTIMATE: Final = "estimate"
SOURCE_DEFAULT: Final = "default"

# Overhead overrides, on the ClusterAPINodeClass (``cpu=100m,memory=1Gi,ephemeral-storage=10%``).
KUBE_RESERVED_ANNOTATION: Final = "karpenter.cluster.x-k8s.io/kube-reserved"
SYSTEM_RESERVED_ANNOTATION: Final = "karpenter.cluster.x-k8s.io/system-reserved"
EVICTION_THRESHOLD_ANNOTATION: Final = "karpenter.cluster.x-k8s.io/eviction-threshold"
# The same, as plugin options (``--plugin-option generic_capi.kube_reserved=cpu=100m``).
KUBE_RESERVED_OPTION: Final = "kube_reserved"
SYSTEM_RESERVED_OPTION: Final = "system_reserved"
EVICTION_THRESHOLD_OPTION: Final = "eviction_threshold"
# Rates of the price estimate, as plugin options (USD per hour).
PRICE_PER_CPU_OPTION: Final = "estimated_price_per_cpu"
PRICE_PER_GIB_OPTION: Final = "estimated_price_per_gib"
PRICE_PER_GPU_OPTION: Final = "estimated_price_per_gpu"

# Labels CAPI copies from a Machine onto its Node: the node-role.kubernetes.io prefix, and the
# node-restriction.kubernetes.io and node.cluster.x-k8s.io domains with their sub-domains.
_PROPAGATED_EXACT: Final = frozenset({"node-role.kubernetes.io"})
_PROPAGATED_DOMAINS: Final = ("node-restriction.kubernetes.io", "node.cluster.x-k8s.io")


# What no real node exceeds (the largest cloud machines have about 2,000 vCPUs and 32 TiB), or
# falls short of: values outside are typos or wrong units, refused with a message saying so.
MAX_CPU_CORES: Final = 16384
MIN_MEMORY_BYTES: Final = 64 * 1024 * 1024
MAX_MEMORY_BYTES: Final = 1024**5
MAX_COUNT: Final = 100_000
"""Pods or GPUs on one node."""
MAX_PRICE: Final = 1_000_000.0
"""USD per hour (the dearest cloud machines list at a few hundred)."""


class ShapeError(ValueError):
    """A value that does not describe a node shape; the message names it."""


class MissingShapeError(ShapeError):
    """Nothing says how much CPU or memory the node has (as opposed to a malformed value)."""


@dataclass(frozen=True)
class NodeShape:
    """What every node of a scalable resource has: capacity, labels, taints; and its price.

    ``labels`` always carry ``kubernetes.io/arch`` and ``kubernetes.io/os`` (defaults ``amd64``
    and ``linux`` when nothing says otherwise). ``price`` is ``None`` when no price annotation
    gives it (see ``PriceRates.estimate``).
    """

    capacity: ResourceList
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    price: float | None
    source: str = field(default="", compare=False)
    """Where the capacity came from, strongest first (``AWS``, ``annotation+template status``)."""


@dataclass(frozen=True)
class TemplateStatus:
    """What an infrastructure machine template reports about the nodes it makes.

    ``source`` names the template in messages (``DockerMachineTemplate default/workers``).
    ``capacity`` is ``status.capacity`` as found (validated by ``resolve_shape``).
    """

    source: str
    capacity: Mapping[str, Any] = field(default_factory=dict)
    architecture: str = ""
    operating_system: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The template as read, for the native plugins' ``describe_machine_template``."""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> TemplateStatus:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        capacity = status.get("capacity") or {}
        node_info = status.get("nodeInfo") or {}
        source = f"{obj.get('kind', 'template')} {meta.get('namespace', '')}/{meta.get('name', '')}"
        if not isinstance(capacity, Mapping):
            raise ShapeError(f"{source}: status.capacity is not a map of resource quantities")
        if not isinstance(node_info, Mapping):
            raise ShapeError(f"{source}: status.nodeInfo is not an object")
        return cls(
            source=source,
            capacity=dict(capacity),
            architecture=str(node_info.get("architecture") or ""),
            operating_system=str(node_info.get("operatingSystem") or ""),
            raw=obj,
        )


# --- annotations ---------------------------------------------------------------------------------


def _quantity(raw: Any, where: str) -> str:
    text = raw.strip() if isinstance(raw, str) else raw
    try:
        quantity = parse_quantity(text)
    except QuantityError as exc:
        raise ShapeError(f"{where}={raw!r}: {exc}") from None
    if quantity.nanos < 0:
        raise ShapeError(f"{where}={raw!r}: must not be negative")
    return str(text)


def _annotation_quantity(annotations: Mapping[str, str], key: str) -> str | None:
    raw = annotations.get(key)
    return None if raw is None else _quantity(raw, f"annotation {key}")


def _label_problem(label: str, value: str) -> str | None:
    """Why a Node could not carry ``label=value``, or why Karpenter must set it itself."""
    if label in (wellknown.LABEL_NODEPOOL, wellknown.LABEL_HOSTNAME):
        return f"label {label} is set by Karpenter and Kubernetes, not by the node's shape"
    restricted = wellknown.restricted_label_reason(label)
    if restricted:
        return restricted
    problems = [f"invalid key, {p}" for p in qualified_name_problems(label)]
    problems += [f"invalid value {value!r}, {p}" for p in label_value_problems(value)]
    return f"label {label!r}: {problems[0]}" if problems else None


def _pairs(annotations: Mapping[str, str], key: str) -> dict[str, str]:
    raw = annotations.get(key, "")
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        label, sep, value = item.partition("=")
        label, value = label.strip(), value.strip()
        if not sep or not label:
            raise ShapeError(f"annotation {key}: {item!r} is not key=value")
        problem = _label_problem(label, value)
        if problem:
            raise ShapeError(f"annotation {key}: {problem}")
        # One node cannot carry two values of a label: which one was meant is a guess.
        if label in labels and labels[label] != value:
            raise ShapeError(
                f"annotation {key}: label {label} is given twice ({labels[label]!r} and {value!r})"
            )
        labels[label] = value
    return labels


def _annotation_taints(annotations: Mapping[str, str]) -> tuple[Taint, ...]:
    key = wellknown.ANNOTATION_CAPACITY_TAINTS
    raw = annotations.get(key, "")
    taints: dict[tuple[str, str], Taint] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        try:
            taint = Taint.parse(item)
        except TaintError as exc:
            raise ShapeError(f"annotation {key}: {exc}") from None
        # The API server refuses a Node whose taints name a key and effect twice.
        problems = [f"key {taint.key!r}: {p}" for p in qualified_name_problems(taint.key)]
        if taint.value:
            problems += [f"value {taint.value!r}: {p}" for p in label_value_problems(taint.value)]
        if problems:
            raise ShapeError(f"annotation {key}: taint {item!r}: {problems[0]}")
        previous = taints.get((taint.key, taint.effect))
        if previous is not None and previous != taint:
            raise ShapeError(
                f"annotation {key}: taint {taint.key}:{taint.effect} is given twice "
                f"({previous} and {taint})"
            )
        taints[(taint.key, taint.effect)] = taint
    return tuple(taints.values())


def _price(annotations: Mapping[str, str]) -> float | None:
    raw = annotations.get(PRICE_ANNOTATION)
    if raw is None:
        return None
    try:
        price = float(raw)
    except ValueError:
        raise ShapeError(f"annotation {PRICE_ANNOTATION}={raw!r}: not a decimal number") from None
    if price < 0 or not math.isfinite(price):
        raise ShapeError(f"annotation {PRICE_ANNOTATION}={raw!r}: must be a finite price >= 0")
    if price > MAX_PRICE:
        raise ShapeError(
            f"annotation {PRICE_ANNOTATION}={raw!r}: more than {MAX_PRICE:g} per hour is not the "
            "price of a node"
        )
    return price


# --- Machine template ---------------------------------------------------------------------------


def propagated_labels(template_labels: Mapping[str, str]) -> dict[str, str]:
    """The Machine-template labels CAPI copies onto the Node (the rest stay on the Machine)."""
    result: dict[str, str] = {}
    for key, value in template_labels.items():
        domain, slash, _ = key.partition("/")
        if not slash:
            continue
        if domain in _PROPAGATED_EXACT or any(
            domain == d or domain.endswith("." + d) for d in _PROPAGATED_DOMAINS
        ):
            result[key] = str(value)
    return result


def machine_taints(raw: Any) -> tuple[Taint, ...]:
    """The taints of a v1beta2 Machine template (``spec.template.spec.taints``).

    Both propagation modes count: ``Always`` taints stay on the Node, ``OnInitialization``
    ones are there when it registers, which is when pods are first placed on it.
    """
    if not raw:
        return ()
    if not isinstance(raw, list):
        raise ShapeError("spec.template.spec.taints is not a list")
    taints: list[Taint] = []
    for index, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise ShapeError(f"spec.template.spec.taints[{index}] is not an object")
        try:
            taints.append(Taint.from_dict(item))
        except TaintError as exc:
            raise ShapeError(f"spec.template.spec.taints[{index}]: {exc}") from None
    return tuple(taints)


# --- the shape ----------------------------------------------------------------------------------


def _capacity_source(origins: Mapping[str, str]) -> str:
    """The distinct origins of the capacity, in precedence order (``annotation+AWS``)."""
    order = [SOURCE_ANNOTATION]
    order += sorted(set(origins.values()) - {SOURCE_ANNOTATION, SOURCE_TEMPLATE_STATUS})
    order.append(SOURCE_TEMPLATE_STATUS)
    present = set(origins.values())
    return "+".join(origin for origin in order if origin in present) or SOURCE_DEFAULT


def _sourced_capacity(
    template: TemplateStatus | None,
    native: MachineTemplateDescription | None,
    kubelet_max_pods: int | None,
) -> tuple[dict[str, str], dict[str, str]]:
    """The capacity the sources below the annotations give, per resource, and each one's origin:
    the template status, overridden by a native description, the pods by kubeadm's max-pods."""
    capacity: dict[str, str] = {}
    origins: dict[str, str] = {}
    if template is not None:
        for name, raw in template.capacity.items():
            capacity[str(name)] = _quantity(raw, f"{template.source} status.capacity.{name}")
            origins[str(name)] = SOURCE_TEMPLATE_STATUS
    if native is not None:
        for name, quantity in native.capacity.to_dict().items():
            capacity[name] = quantity
            origins[name] = native.source
    if kubelet_max_pods is not None:
        capacity["pods"] = str(kubelet_max_pods)
        origins["pods"] = SOURCE_KUBEADM_CONFIG
    return capacity, origins


def _node_labels(
    annotations: Mapping[str, str],
    template: TemplateStatus | None,
    native: MachineTemplateDescription | None,
    template_labels: Mapping[str, str],
) -> dict[str, str]:
    """The node's labels, per key: those CAPI propagates from the Machine template, the
    template status's arch and OS, a native description's, then the annotated ones, with
    linux/amd64 when no source says."""
    labels = propagated_labels(template_labels)
    if template is not None:
        if template.architecture:
            labels[wellknown.LABEL_ARCH] = template.architecture
        if template.operating_system:
            labels[wellknown.LABEL_OS] = template.operating_system
    if native is not None:
        labels.update(native.labels)
    labels.update(_pairs(annotations, wellknown.ANNOTATION_CAPACITY_LABELS))
    labels.setdefault(wellknown.LABEL_ARCH, DEFAULT_ARCH)
    labels.setdefault(wellknown.LABEL_OS, DEFAULT_OS)
    return labels


def resolve_shape(
    annotations: Mapping[str, str],
    *,
    template: TemplateStatus | None = None,
    native: MachineTemplateDescription | None = None,
    template_labels: Mapping[str, str] | None = None,
    template_taints: Iterable[Taint] = (),
    kubelet_max_pods: int | None = None,
) -> NodeShape:
    """The node shape from every source, annotations first (see the module docstring).

    ``kubelet_max_pods`` is the bootstrap config's ``max-pods``: the pods capacity, unless the
    ``maxPods`` annotation says otherwise.

    Raises ``MissingShapeError`` when no source gives CPU and memory, ``ShapeError`` when
    a value is malformed.
    """
    capacity, origins = _sourced_capacity(template, native, kubelet_max_pods)
    annotated, counted_gpu = _annotated_capacity(annotations)
    for name, value in annotated.items():
        if value is not None:
            capacity[name] = value
            origins[name] = SOURCE_ANNOTATION
    capacity.setdefault("pods", str(DEFAULT_MAX_PODS))
    for name, annotation in (
        ("cpu", wellknown.ANNOTATION_CAPACITY_CPU),
        ("memory", wellknown.ANNOTATION_CAPACITY_MEMORY),
    ):
        if name not in capacity:
            where = f" or status.capacity.{name} on {template.source}" if template else ""
            raise MissingShapeError(
                f"no {name} capacity: annotation {annotation} is required{where}"
            )
    resources = ResourceList.parse(capacity)
    for name in ("cpu", "memory"):
        if resources.milli(name) <= 0:
            where = _where(name, origins, counted_gpu)
            raise ShapeError(f"{where}={capacity[name]!r}: must be greater than zero")
    _check_plausible(resources, capacity, origins, counted_gpu)

    labels = _node_labels(annotations, template, native, template_labels or {})

    return NodeShape(
        capacity=resources,
        labels=MappingProxyType(labels),
        taints=_taints(annotations, template_taints),
        price=_price(annotations),
        source=_capacity_source(origins),
    )


def _annotated_capacity(
    annotations: Mapping[str, str],
) -> tuple[dict[str, str | None], str | None]:
    """Capacity the annotations give (``None`` where they give none), and the GPU resource
    name when they count GPUs (the count needs a valid extended resource name)."""
    annotated = {
        "cpu": _annotation_quantity(annotations, wellknown.ANNOTATION_CAPACITY_CPU),
        "memory": _annotation_quantity(annotations, wellknown.ANNOTATION_CAPACITY_MEMORY),
        "ephemeral-storage": _annotation_quantity(
            annotations, wellknown.ANNOTATION_CAPACITY_EPHEMERAL_DISK
        ),
        "pods": _annotation_quantity(annotations, wellknown.ANNOTATION_CAPACITY_MAX_PODS),
    }
    gpu_count = _annotation_quantity(annotations, wellknown.ANNOTATION_CAPACITY_GPU_COUNT)
    gpu_type = annotations.get(wellknown.ANNOTATION_CAPACITY_GPU_TYPE, "").strip()
    if gpu_count is not None:
        if not gpu_type:
            raise ShapeError(
                f"annotation {wellknown.ANNOTATION_CAPACITY_GPU_COUNT} needs "
                f"{wellknown.ANNOTATION_CAPACITY_GPU_TYPE} (the resource name, e.g. nvidia.com/gpu)"
            )
        problem = _extended_resource_problem(gpu_type)
        if problem:
            raise ShapeError(
                f"annotation {wellknown.ANNOTATION_CAPACITY_GPU_TYPE}={gpu_type!r}: {problem}"
            )
        annotated[gpu_type] = gpu_count
    return annotated, gpu_type if gpu_count is not None else None


def _taints(annotations: Mapping[str, str], template_taints: Iterable[Taint]) -> tuple[Taint, ...]:
    """The annotated taints, then the template's not annotated with the same key and effect."""
    taints = list(_annotation_taints(annotations))
    declared = {(taint.key, taint.effect) for taint in taints}
    for taint in template_taints:
        if (taint.key, taint.effect) not in declared:
            declared.add((taint.key, taint.effect))
            taints.append(taint)
    return tuple(taints)


def _extended_resource_problem(name: str) -> str | None:
    """Why ``name`` cannot be an extended resource (a GPU's), or ``None``.

    Extended resources are domain-prefixed qualified names outside ``kubernetes.io``; a plain
    ``cpu`` would silently replace the node's CPU capacity.
    """
    problems = qualified_name_problems(name)
    if problems:
        return f"not a resource name, {problems[0]}"
    domain = wellknown.label_domain(name)
    if not domain:
        return "an extended resource name needs a domain prefix (e.g. nvidia.com/gpu)"
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return "the kubernetes.io domain is reserved for Kubernetes' own resources"
    return None


def _where(name: str, origins: Mapping[str, str], gpu_type: str | None) -> str:
    """The annotation or field a capacity came from, for messages."""
    annotation = {
        "cpu": wellknown.ANNOTATION_CAPACITY_CPU,
        "memory": wellknown.ANNOTATION_CAPACITY_MEMORY,
        "ephemeral-storage": wellknown.ANNOTATION_CAPACITY_EPHEMERAL_DISK,
        "pods": wellknown.ANNOTATION_CAPACITY_MAX_PODS,
    }.get(name)
    if name == gpu_type:
        annotation = wellknown.ANNOTATION_CAPACITY_GPU_COUNT
    if origins.get(name) == SOURCE_ANNOTATION and annotation:
        return f"annotation {annotation}"
    return f"{name} capacity ({origins.get(name, SOURCE_DEFAULT)})"


def _check_plausible(
    resources: ResourceList,
    capacity: Mapping[str, str],
    origins: Mapping[str, str],
    gpu_type: str | None,
) -> None:
    """Refuse capacities no node has: they are typos or wrong units, and the solver would
    otherwise happily pick a 10^12-core node, or never fit anything on one with 8 bytes of
    memory, without a word."""
    cpu = resources.milli("cpu")
    if cpu > MAX_CPU_CORES * 1000:
        raise ShapeError(
            f"{_where('cpu', origins, gpu_type)}={capacity['cpu']!r}: more than "
            f"{MAX_CPU_CORES} cores is not a node"
        )
    memory = resources.milli("memory") // 1000
    if memory < MIN_MEMORY_BYTES:
        raise ShapeError(
            f"{_where('memory', origins, gpu_type)}={capacity['memory']!r}: less than 64Mi of "
            "memory is not a node (a unit missing? quantities without one are bytes, e.g. 8Gi)"
        )
    if memory > MAX_MEMORY_BYTES:
        raise ShapeError(
            f"{_where('memory', origins, gpu_type)}={capacity['memory']!r}: more than 1Pi of "
            "memory is not a node"
        )
    counted = ["pods"] + ([gpu_type] if gpu_type else [])
    for name in counted:
        milli = resources.milli(name)
        where = f"{_where(name, origins, gpu_type)}={capacity[name]!r}"
        if milli % 1000:
            raise ShapeError(f"{where}: must be a whole number")
        if name == "pods" and milli == 0:
            raise ShapeError(f"{where}: a node that holds no pods cannot run anything")
        if milli > MAX_COUNT * 1000:
            raise ShapeError(f"{where}: more than {MAX_COUNT} is not a node's")


def shape_from_annotations(annotations: Mapping[str, str]) -> NodeShape | None:
    """The shape the annotations alone describe; ``None`` if they name neither cpu nor memory.

    cpu and memory are required together; ``maxPods`` defaults to 110 as in cluster-autoscaler;
    ``gpu-count`` needs ``gpu-type`` (the extended resource name, e.g. ``nvidia.com/gpu``).
    """
    if (
        wellknown.ANNOTATION_CAPACITY_CPU not in annotations
        and wellknown.ANNOTATION_CAPACITY_MEMORY not in annotations
    ):
        return None
    return resolve_shape(annotations)
