"""Karpenter's own objects and values for plugin authors (``kube`` holds what Kubernetes
defines): the well-known labels, the NodeClass, taints, quantities, durations and timestamps,
and the checks kube applies to label keys and values. Named ``model`` before issue 27.

A provider reads a ``ClusterAPINodeClass`` (or its own NodeClass kind, as a mapping: the
``NodeClass`` alias), labels the instance types it offers with the keys in ``wellknown``,
parses the quantities and durations users write in annotations and specs with the errors the
core reports, stamps times as the API does, and registers its own metrics on the operator's
registry through ``Metrics``. Pinned, with the rest of ``karpenter_capi.plugin_api``, by
``tests/core/plugin_host/test_public_api.py``.
"""

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.duration import DurationError, parse_duration
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass, LaunchMode, LaunchSpec
from karpenter_capi.core.api.runtime_validation import (
    label_value_problems,
    qualified_name_problems,
)
from karpenter_capi.core.clock import format_timestamp, parse_timestamp
from karpenter_capi.core.hookspecs import NodeClass
from karpenter_capi.core.observability.metrics import Metrics
from karpenter_capi.core.values.quantity import QuantityError
from karpenter_capi.core.values.resources import ResourceListError
from karpenter_capi.core.values.taints import Taint, TaintError

__all__ = [
    "ClusterAPINodeClass",
    "DurationError",
    "LaunchMode",
    "LaunchSpec",
    "Metrics",
    "NodeClass",
    "QuantityError",
    "ResourceListError",
    "Taint",
    "TaintError",
    "format_timestamp",
    "label_value_problems",
    "parse_duration",
    "parse_timestamp",
    "qualified_name_problems",
    "wellknown",
]
