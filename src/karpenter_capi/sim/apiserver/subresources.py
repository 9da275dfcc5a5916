"""The ``scale`` subresource, and which subresources a request may name.

HorizontalPodAutoscalers, ``kubectl scale`` and CAPI's MachineDeployment scaling read and write
replicas through ``/scale`` as an ``autoscaling/v1`` Scale, whatever the kind stores them in
(``spec.replicas`` of a Deployment, a CRD's ``scale`` paths). The server verbs map between the
two here; the write itself is an ordinary update through the engine.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.values.selectors import selector_to_string
from karpenter_capi.sim.apiserver import messages
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.engine import Engine, precondition_of
from karpenter_capi.sim.apiserver.objects import copy_object, get_path, set_path
from karpenter_capi.sim.apiserver.store import Table

JsonObject = dict[str, Any]


def check_subresource(definition: ResourceDefinition, subresource: str | None) -> None:
    """404 for a subresource the resource does not have (eviction has its own verb)."""
    if subresource is None:
        return
    if subresource not in definition.subresources or subresource == "eviction":
        raise NotFound(
            f"the server could not find the requested resource ({definition.plural}/{subresource})"
        )


def scale_of(definition: ResourceDefinition, stored: JsonObject) -> JsonObject:
    """``stored`` seen through its scale subresource (an ``autoscaling/v1`` Scale)."""
    meta = stored["metadata"]
    scale_meta = {
        key: meta[key]
        for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        if key in meta
    }
    status: JsonObject = {"replicas": int(get_path(stored, definition.scale_status_path) or 0)}
    if definition.scale_selector_path:
        selector = get_path(stored, definition.scale_selector_path)
        if isinstance(selector, dict):
            selector = selector_to_string(selector)
        if selector:
            status["selector"] = selector
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_meta,
        "spec": {"replicas": int(get_path(stored, definition.scale_spec_path) or 0)},
        "status": status,
    }


def write_scale(
    engine: Engine,
    definition: ResourceDefinition,
    table: Table,
    stored: JsonObject,
    scale: JsonObject,
) -> JsonObject:
    """Set the replicas a Scale asks for on ``stored``; returns the Scale as written."""
    name = str(stored["metadata"]["name"])
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise messages.invalid(
            definition,
            name,
            [
                messages.invalid_value(
                    "spec.replicas", replicas, "must be greater than or equal to 0"
                )
            ],
            kind="Scale.autoscaling",
        )
    meta = scale.get("metadata") or {}
    new = copy_object(stored)
    set_path(new, definition.scale_spec_path, replicas)
    written = engine.update_object(table, stored, new, precondition=precondition_of(meta))
    return scale_of(definition, written)
