"""Node shape of a Cluster API scalable resource, read from its scale-from-zero annotations.

A MachineDeployment at zero replicas has no Node to look at, so cluster-autoscaler defined the
``capacity.cluster-autoscaler.kubernetes.io/*`` annotations to describe the node it would make;
CAPI users already write them, so this plugin reads the same ones, plus
``karpenter.cluster.x-k8s.io/price`` for the hourly price CAPI itself cannot know.

Every value is checked: a malformed annotation raises ``ShapeError`` naming the annotation and
the value, and the caller marks only that resource unusable (DESIGN decision 9).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.scheduling.quantity import QuantityError, parse_quantity
from karpenter_capi.core.scheduling.resources import ResourceList
from karpenter_capi.core.scheduling.taints import Taint, TaintError

DEFAULT_MAX_PODS: Final = 110
PRICE_ANNOTATION: Final = "karpenter.cluster.x-k8s.io/price"
"""Hourly price of one node of the resource (USD, decimal); pricing plugins may override it."""


class ShapeError(ValueError):
    """An annotation that does not describe a node shape; the message names it."""


@dataclass(frozen=True)
class NodeShape:
    capacity: ResourceList
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    price: float | None


def _quantity(annotations: Mapping[str, str], key: str) -> str | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        quantity = parse_quantity(raw.strip())
    except QuantityError as exc:
        raise ShapeError(f"annotation {key}={raw!r}: {exc}") from None
    if quantity.nanos < 0:
        raise ShapeError(f"annotation {key}={raw!r}: must not be negative")
    return raw.strip()


def _pairs(annotations: Mapping[str, str], key: str) -> dict[str, str]:
    raw = annotations.get(key, "")
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        label, sep, value = item.partition("=")
        if not sep or not label.strip():
            raise ShapeError(f"annotation {key}: {item!r} is not key=value")
        labels[label.strip()] = value.strip()
    return labels


def _taints(annotations: Mapping[str, str]) -> tuple[Taint, ...]:
    key = wellknown.ANNOTATION_CAPACITY_TAINTS
    raw = annotations.get(key, "")
    taints: list[Taint] = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        try:
            taints.append(Taint.parse(item))
        except TaintError as exc:
            raise ShapeError(f"annotation {key}: {exc}") from None
    return tuple(taints)


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
    return price


def shape_from_annotations(annotations: Mapping[str, str]) -> NodeShape | None:
    """The shape the annotations describe, ``None`` if they describe none (no cpu and memory).

    cpu and memory are required together; ``maxPods`` defaults to 110 as in cluster-autoscaler;
    ``gpu-count`` needs ``gpu-type`` (the extended resource name, e.g. ``nvidia.com/gpu``).
    """
    cpu = _quantity(annotations, wellknown.ANNOTATION_CAPACITY_CPU)
    memory = _quantity(annotations, wellknown.ANNOTATION_CAPACITY_MEMORY)
    if cpu is None and memory is None:
        return None
    if cpu is None or memory is None:
        missing = (
            wellknown.ANNOTATION_CAPACITY_CPU
            if cpu is None
            else wellknown.ANNOTATION_CAPACITY_MEMORY
        )
        raise ShapeError(f"annotation {missing} is required with the other one")
    capacity: dict[str, str] = {"cpu": cpu, "memory": memory}
    pods = _quantity(annotations, wellknown.ANNOTATION_CAPACITY_MAX_PODS)
    capacity["pods"] = pods if pods is not None else str(DEFAULT_MAX_PODS)
    disk = _quantity(annotations, wellknown.ANNOTATION_CAPACITY_EPHEMERAL_DISK)
    if disk is not None:
        capacity["ephemeral-storage"] = disk
    gpu_count = _quantity(annotations, wellknown.ANNOTATION_CAPACITY_GPU_COUNT)
    gpu_type = annotations.get(wellknown.ANNOTATION_CAPACITY_GPU_TYPE, "").strip()
    if gpu_count is not None:
        if not gpu_type:
            raise ShapeError(
                f"annotation {wellknown.ANNOTATION_CAPACITY_GPU_COUNT} needs "
                f"{wellknown.ANNOTATION_CAPACITY_GPU_TYPE} (the resource name, e.g. nvidia.com/gpu)"
            )
        capacity[gpu_type] = gpu_count
    return NodeShape(
        capacity=ResourceList.parse(capacity),
        labels=_pairs(annotations, wellknown.ANNOTATION_CAPACITY_LABELS),
        taints=_taints(annotations),
        price=_price(annotations),
    )
