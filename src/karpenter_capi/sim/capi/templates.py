"""Machine templates: when two are "the same" for a rollout, and which Machines a selector owns.

A MachineDeployment replaces its Machines only when a field that cannot change in place
changes. CAPI hashes the template without those fields (``machine-template-hash``, the suffix of
the MachineSet's name), so relabelling a template or moving a drain timeout rolls nothing while
a new version, infrastructure template or failure domain does. This module computes that hash
and the selectors CAPI's webhooks would default, both shared by the MachineDeployment controller
(which MachineSet is current) and the MachineSet controller (are its Machines up to date).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.sim.capi.objects import (
    LABEL_DEPLOYMENT_NAME,
    LABEL_SET_NAME,
    encode_hash,
    label_value,
    name_of,
    nested,
    ref_group,
)

# Machine spec fields CAPI propagates in place (no rollout), in either layout's spelling.
_IN_PLACE_FIELDS = frozenset(
    {
        "nodeDrainTimeout",
        "nodeVolumeDetachTimeout",
        "nodeDeletionTimeout",
        "nodeDrainTimeoutSeconds",
        "nodeVolumeDetachTimeoutSeconds",
        "nodeDeletionTimeoutSeconds",
        "minReadySeconds",
        "readinessGates",
        "taints",
    }
)


def _normalized_ref(ref: Any) -> Any:
    # A reference names the same template whichever version or layout spells it.
    if not isinstance(ref, Mapping):
        return ref
    return {"group": ref_group(ref), "kind": ref.get("kind"), "name": ref.get("name")}


def template_hash(md: Mapping[str, Any]) -> str:
    """The ``machine-template-hash`` of a MachineDeployment's ``spec.template``: ten characters
    of kube's name alphabet, stable across processes and both CAPI layouts."""
    spec = nested(md, "spec", "template", "spec")
    normalized: dict[str, Any] = (
        {k: copy.deepcopy(v) for k, v in spec.items() if k not in _IN_PLACE_FIELDS}
        if isinstance(spec, Mapping)
        else {}
    )
    if "infrastructureRef" in normalized:
        normalized["infrastructureRef"] = _normalized_ref(normalized["infrastructureRef"])
    bootstrap = normalized.get("bootstrap")
    if isinstance(bootstrap, Mapping) and "configRef" in bootstrap:
        normalized["bootstrap"] = dict(bootstrap, configRef=_normalized_ref(bootstrap["configRef"]))
    # Set by CAPI from the owner, not a template difference.
    normalized.pop("clusterName", None)
    data = json.dumps(normalized, sort_keys=True, separators=(",", ":")).encode()
    return encode_hash(data)


def _selector(obj: Mapping[str, Any]) -> JsonObject | None:
    selector = nested(obj, "spec", "selector")
    if isinstance(selector, Mapping) and (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        return copy.deepcopy(dict(selector))
    return None


def deployment_selector(md: Mapping[str, Any]) -> JsonObject:
    """``spec.selector``, or what CAPI's webhook defaults an empty one to."""
    found = _selector(md)
    if found is not None:
        return found
    return {"matchLabels": {LABEL_DEPLOYMENT_NAME: label_value(name_of(md))}}


def machine_set_selector(ms: Mapping[str, Any]) -> JsonObject:
    """``spec.selector``, or what CAPI's webhook defaults an empty one to."""
    found = _selector(ms)
    if found is not None:
        return found
    return {"matchLabels": {LABEL_SET_NAME: label_value(name_of(ms))}}
