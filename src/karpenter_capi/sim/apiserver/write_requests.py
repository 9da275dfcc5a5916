"""What a write verb checks of its request and makes of its body before the Engine stores it.

``InMemoryAPIServer`` keeps the verbs (locking, faults, presenting copies); the rules that
depend only on the request and the stored object live here: how a PATCH body is applied by its
content type (JSON, merge, strategic merge), and the uid/resourceVersion preconditions a
DELETE may carry. Pure functions, so the verbs read as the steps kube-apiserver takes.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.kube.client import PatchType, Preconditions
from karpenter_capi.core.kube.errors import BadRequest
from karpenter_capi.sim.apiserver import messages
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.patch import json_patch, merge_patch
from karpenter_capi.sim.apiserver.strategic import strategic_merge_patch

JsonObject = dict[str, Any]


def apply_patch(
    base: JsonObject,
    patch: JsonObject | list[JsonObject],
    patch_type: PatchType,
    kind: str,
) -> JsonObject:
    """``patch`` applied to ``base`` as its ``patch_type`` says (``kind`` names the strategic
    merge keys); 400 when the body or the result is not a JSON object."""
    if patch_type == PatchType.JSON:
        result = json_patch(base, patch)
    elif isinstance(patch, dict):
        if patch_type == PatchType.STRATEGIC:
            result = strategic_merge_patch(base, patch, kind)
        else:
            result = merge_patch(base, patch)
    else:
        raise BadRequest(f"a {patch_type.value} patch must be a JSON object")
    if not isinstance(result, dict):
        raise BadRequest("the patched document is not a JSON object")
    return result


def check_delete_preconditions(
    definition: ResourceDefinition,
    stored: JsonObject,
    preconditions: Preconditions | None,
) -> None:
    """A delete's ``preconditions`` against the object ``stored``: 409 Conflict when its uid
    or resourceVersion differs, with kube's message."""
    if preconditions is None:
        return
    meta = stored["metadata"]
    name = str(meta["name"])
    if preconditions.uid and preconditions.uid != meta.get("uid"):
        raise messages.conflict(
            definition,
            name,
            f"Precondition failed: UID in precondition: {preconditions.uid}, UID in object "
            f"meta: {meta.get('uid')}",
        )
    version = preconditions.resource_version
    if version and version != meta.get("resourceVersion"):
        raise messages.conflict(
            definition,
            name,
            f"Precondition failed: ResourceVersion in precondition: {version}, "
            f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
        )
