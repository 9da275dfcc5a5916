"""The per-NodeClass settings that shape an inventory: the kubelet overhead and the rates
behind the price estimate of a resource nobody priced (``shape``'s module docstring).

Why a module of its own: these are read once per NodeClass from the plugin options and its
annotations, apart from the shape of each resource (``shape.resolve_shape``) they then apply to.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Final

from karpenter_capi.plugin_api import ResourceList
from karpenter_capi.plugins.generic_capi.overhead import (
    SOURCE_ANNOTATION as OVERHEAD_ANNOTATION,
)
from karpenter_capi.plugins.generic_capi.overhead import (
    SOURCE_OPTION,
    OverheadPolicy,
    SettingsError,
    parse_reservation,
)
from karpenter_capi.plugins.generic_capi.shape import (
    EVICTION_THRESHOLD_ANNOTATION,
    EVICTION_THRESHOLD_OPTION,
    KUBE_RESERVED_ANNOTATION,
    KUBE_RESERVED_OPTION,
    PRICE_PER_CPU_OPTION,
    PRICE_PER_GIB_OPTION,
    PRICE_PER_GPU_OPTION,
    SYSTEM_RESERVED_ANNOTATION,
    SYSTEM_RESERVED_OPTION,
)

_GIB: Final = 1024 * 1024 * 1024


@dataclass(frozen=True)
class PriceRates:
    """On-demand list rates (USD per hour) behind the estimate for unpriced resources.

    The defaults are a general-purpose cloud's: $0.031611 per vCPU and $0.004237 per GiB
    (GCP N2; 2 vCPU + 8 GiB comes to $0.097, AWS m5.large lists at $0.096) and $0.35 per GPU
    (an entry-level data-centre GPU such as the T4). Only the order matters to the solver; the
    point is that an unpriced node costs more the larger it is, on the same scale as annotated
    prices.
    """

    per_cpu: float = 0.031611
    per_gib: float = 0.004237
    per_gpu: float = 0.35

    def estimate(self, capacity: ResourceList) -> float:
        """The estimated hourly price of a node of ``capacity``."""
        gpus = sum(capacity.value(name) for name in capacity if name.endswith("/gpu"))
        price = (
            capacity.milli("cpu") / 1000 * self.per_cpu
            + capacity.milli("memory") / 1000 / _GIB * self.per_gib
            + gpus * self.per_gpu
        )
        return round(price, 6)


@dataclass(frozen=True)
class ShapeSettings:
    """The per-NodeClass settings that shape an inventory: overhead and price estimate."""

    overhead: OverheadPolicy = field(default_factory=OverheadPolicy)
    rates: PriceRates = field(default_factory=PriceRates)


def _rate(options: Mapping[str, str], name: str, default: float) -> float:
    raw = options.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"plugin option {name}={raw!r}: not a decimal number") from None
    if value < 0 or not math.isfinite(value):
        raise SettingsError(f"plugin option {name}={raw!r}: must be a finite rate >= 0")
    return value


def settings_from(
    nodeclass_annotations: Mapping[str, str], options: Mapping[str, str]
) -> ShapeSettings:
    """Settings from the plugin options, overridden per resource by the NodeClass annotations.

    Raises ``SettingsError`` naming the malformed option or annotation.
    """
    layers: list[dict[str, int | Fraction]] = []
    origin = ""
    for option, annotation in (
        (KUBE_RESERVED_OPTION, KUBE_RESERVED_ANNOTATION),
        (SYSTEM_RESERVED_OPTION, SYSTEM_RESERVED_ANNOTATION),
        (EVICTION_THRESHOLD_OPTION, EVICTION_THRESHOLD_ANNOTATION),
    ):
        merged = parse_reservation(options.get(option, ""), f"plugin option {option}")
        annotated = parse_reservation(
            nodeclass_annotations.get(annotation, ""), f"annotation {annotation}"
        )
        if annotated:
            origin = OVERHEAD_ANNOTATION
        elif merged and not origin:
            origin = SOURCE_OPTION
        merged.update(annotated)
        layers.append(merged)
    defaults = PriceRates()
    return ShapeSettings(
        overhead=OverheadPolicy(
            kube_reserved=MappingProxyType(layers[0]),
            system_reserved=MappingProxyType(layers[1]),
            eviction_threshold=MappingProxyType(layers[2]),
            origin=origin,
        ),
        rates=PriceRates(
            per_cpu=_rate(options, PRICE_PER_CPU_OPTION, defaults.per_cpu),
            per_gib=_rate(options, PRICE_PER_GIB_OPTION, defaults.per_gib),
            per_gpu=_rate(options, PRICE_PER_GPU_OPTION, defaults.per_gpu),
        ),
    )
