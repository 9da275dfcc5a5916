"""What each hook must return, so the facade can name a plugin that returns the wrong type.

pluggy passes any return value through; the core relies on the types of ``core.hookspecs``.
The checks are keyed by hook name, and the names are written as references to the specs so that
a renamed or removed hook fails type checking here rather than silently going unchecked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from karpenter_capi.core import hookspecs
from karpenter_capi.core.hookspecs import (
    Instance,
    InterruptionNotice,
    LaunchResult,
    LaunchWatch,
    MachineTemplateDescription,
)
from karpenter_capi.core.instancetype import InstanceType


def object_name(obj: object) -> str:
    """``kind/name`` of a model or a JSON dict, for messages."""
    metadata: Any = getattr(obj, "metadata", None)
    kind: Any = getattr(obj, "kind", None)
    if isinstance(obj, Mapping):
        metadata = obj.get("metadata")
        kind = obj.get("kind")
    name = (
        metadata.get("name") if isinstance(metadata, Mapping) else getattr(metadata, "name", None)
    )
    return f"{kind or 'object'}/{name or '?'}"


def _is_list_of(value: object, item_type: type) -> bool:
    return isinstance(value, list) and all(isinstance(item, item_type) for item in value)


def _is_kind_list(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, tuple)
        and len(item) == 2
        and isinstance(item[0], str)
        and isinstance(item[1], str)
        for item in value
    )


def spec_name(spec: Callable[..., object]) -> str:
    """The name of the hook ``spec`` (a function of ``core.hookspecs``): names are written as
    references to the specs, so a renamed or removed hook fails type checking here."""
    return spec.__name__


# What each hook must return when it answers (None, "not mine", is handled by the caller).
RESULT_CHECKS: Final[dict[str, tuple[Callable[[object], bool], str]]] = {
    spec_name(hookspecs.karpenter_capi_nodeclass_kinds): (
        _is_kind_list,
        "a list of (group, kind) string tuples",
    ),
    spec_name(hookspecs.karpenter_capi_instance_types): (
        lambda v: _is_list_of(v, InstanceType),
        "a list of InstanceType or None",
    ),
    spec_name(hookspecs.karpenter_capi_price_offerings): (
        lambda v: _is_list_of(v, InstanceType),
        "a list of InstanceType or None",
    ),
    spec_name(hookspecs.karpenter_capi_create): (
        lambda v: isinstance(v, LaunchResult),
        "a LaunchResult or None",
    ),
    spec_name(hookspecs.karpenter_capi_launch_watches): (
        lambda v: _is_list_of(v, LaunchWatch),
        "a list of LaunchWatch or None",
    ),
    spec_name(hookspecs.karpenter_capi_delete): (lambda v: v is True, "True or None"),
    spec_name(hookspecs.karpenter_capi_get): (
        lambda v: isinstance(v, Instance),
        "an Instance or None",
    ),
    spec_name(hookspecs.karpenter_capi_list): (
        lambda v: _is_list_of(v, Instance),
        "a list of Instance",
    ),
    spec_name(hookspecs.karpenter_capi_is_drifted): (
        lambda v: isinstance(v, str) and bool(v),
        "a non-empty string or None",
    ),
    spec_name(hookspecs.karpenter_capi_disruption_blocked): (
        lambda v: (
            isinstance(v, dict)
            and all(isinstance(k, str) and isinstance(w, str) for k, w in v.items())
        ),
        "a dict of NodeClaim name to reason, or None",
    ),
    spec_name(hookspecs.karpenter_capi_interruptions): (
        lambda v: _is_list_of(v, InterruptionNotice),
        "a list of InterruptionNotice or None",
    ),
    spec_name(hookspecs.karpenter_capi_interruptions_handled): (
        lambda v: v is None,
        "None",
    ),
    spec_name(hookspecs.karpenter_capi_describe_machine_template): (
        lambda v: isinstance(v, MachineTemplateDescription),
        "a MachineTemplateDescription or None",
    ),
}
