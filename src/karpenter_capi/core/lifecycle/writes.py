"""Every write the lifecycle controllers make goes through here, so ``dry_run`` is one switch.

With ``ControllerContext.dry_run`` a controller must log the writes it would make and make
none: API patches and deletes, Kubernetes Events, and the provider calls that change the
infrastructure (launch, delete). Routing them through one object keeps that promise in one
place instead of an ``if`` at every call site. In dry run a patch returns the object as the API
server would have (an RFC 7386 merge computed locally), so the rest of a reconcile can go on
reasoning about the result.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from karpenter_capi.core.kube.client import JsonObject, Preconditions
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.core.runtime.controller import ControllerContext


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge key by key, ``None`` deletes, the rest replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: dict[str, Any] = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _describe(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    name = meta.get("name", "?")
    namespace = meta.get("namespace")
    return (
        f"{obj.get('kind', 'object')} {namespace}/{name}"
        if namespace
        else f"{obj.get('kind', 'object')} {name}"
    )


class Writes:
    """Patches, deletes and Events for one controller, honouring ``dry_run``."""

    def __init__(self, ctx: ControllerContext, controller: str) -> None:
        self._ctx = ctx
        self._controller = controller

    @property
    def dry_run(self) -> bool:
        return self._ctx.dry_run

    def would(self, action: str, *args: object) -> None:
        """Log a write that dry run skips (provider calls use this directly)."""
        self._ctx.log.info("dry-run: %s would " + action, self._controller, *args)

    def patch(
        self,
        resource: Resource,
        current: JsonObject,
        patch: JsonObject,
        *,
        subresource: str | None = None,
    ) -> JsonObject:
        """Merge-patch ``current``; returns the object as stored (or as it would be)."""
        meta = current.get("metadata") or {}
        if self.dry_run:
            where = f"/{subresource}" if subresource else ""
            self.would(
                "patch %s%s: %s", _describe(current), where, json.dumps(patch, sort_keys=True)
            )
            patched: JsonObject = merge_patch(current, patch)
            return patched
        return self._ctx.client.patch(
            resource,
            str(meta.get("name", "")),
            patch,
            meta.get("namespace"),
            subresource=subresource,
        )

    def delete(self, resource: Resource, current: JsonObject) -> bool:
        """Delete ``current`` if it is still the same object (uid); False when already gone."""
        meta = current.get("metadata") or {}
        if self.dry_run:
            self.would("delete %s", _describe(current))
            return True
        uid = meta.get("uid")
        try:
            self._ctx.client.delete(
                resource,
                str(meta.get("name", "")),
                meta.get("namespace"),
                preconditions=Preconditions(uid=str(uid)) if uid else None,
            )
        except NotFound:
            return False
        return True

    def event(
        self, involved: Mapping[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        if self.dry_run:
            self.would(
                "record %s event %s on %s: %s", event_type, reason, _describe(involved), message
            )
            return
        self._ctx.recorder.record(involved, event_type, reason, message)
