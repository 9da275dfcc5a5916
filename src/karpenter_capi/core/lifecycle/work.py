"""One reconcile's working copy of a NodeClaim, shared by the lifecycle steps.

Launch, registration, initialization and liveness each change a little of the same NodeClaim
(labels, annotations, status fields, conditions). Like upstream's lifecycle controller they
change one in-memory copy, and the controller writes it back once at the end: metadata through
the main resource, status through the status subresource, both with the resourceVersion read as
precondition, so a reconcile never overwrites a condition another controller wrote meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import READINESS_CONDITIONS, NodeClaim
from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.lifecycle.conditions import READY, ConditionSet


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value (dicts, lists, scalars), as ``copy.deepcopy`` makes of one
    at a fraction of its cost: no memo, no dispatch on type. Anything else is shared, as
    ``deepcopy`` shares strings and numbers."""
    if isinstance(value, dict):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    return value


@dataclass
class NodeClaimWork:
    raw: JsonObject
    """The NodeClaim as last read or written (its resourceVersion is the write precondition)."""
    model: NodeClaim
    labels: dict[str, str]
    annotations: dict[str, str]
    status: dict[str, Any]
    """``status`` without ``conditions`` (those live in ``conditions``)."""
    conditions: ConditionSet
    node: JsonObject | None = None
    """The Node registration found (and, once synced, as written)."""
    deleted: bool = False
    """A step deleted the NodeClaim; later steps and the write-back are skipped."""

    @classmethod
    def start(cls, raw: JsonObject, model: NodeClaim, now: datetime) -> NodeClaimWork:
        meta = raw.get("metadata") or {}
        status: dict[str, Any] = json_copy(dict(raw.get("status") or {}))
        conditions = status.pop("conditions", None) or []
        created = meta.get("creationTimestamp")
        generation = meta.get("generation")
        return cls(
            raw=raw,
            model=model,
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            status=status,
            conditions=ConditionSet(
                conditions,
                now=now,
                generation=int(generation) if generation is not None else None,
                created=parse_timestamp(str(created)) if created else None,
                dependents=[str(c) for c in READINESS_CONDITIONS],
                root=READY,
            ),
        )

    @property
    def name(self) -> str:
        return str(self.raw["metadata"]["name"])

    @property
    def uid(self) -> str:
        return str(self.raw["metadata"].get("uid", ""))

    @property
    def nodepool(self) -> str:
        return self.labels.get(wellknown.LABEL_NODEPOOL, "")

    @property
    def capacity_type(self) -> str:
        return self.labels.get(wellknown.LABEL_CAPACITY_TYPE, "")

    @property
    def provider_id(self) -> str:
        return str(self.status.get("providerID") or "")

    @property
    def created(self) -> datetime | None:
        created = self.raw["metadata"].get("creationTimestamp")
        return parse_timestamp(str(created)) if created else None

    def to_model(self) -> NodeClaim:
        """The NodeClaim as it stands in this reconcile (what plugins are shown): the model
        read, unless a step changed it (then validated again, with the changes)."""
        if not self.metadata_patch() and not self.status_patch():
            return self.model
        # Validation reads its input and keeps none of it (the models copy what they hold),
        # so the body shares what did not change with ``raw`` instead of copying it.
        body = {
            **self.raw,
            "metadata": {
                **self.raw["metadata"],
                "labels": dict(self.labels),
                "annotations": dict(self.annotations),
            },
            "status": {**self.status, "conditions": self.conditions.to_json()},
        }
        return NodeClaim.model_validate(body)

    def metadata_patch(self) -> dict[str, Any]:
        """Labels and annotations changed by the steps (they only ever add or change keys)."""
        meta = self.raw.get("metadata") or {}
        patch: dict[str, Any] = {}
        for field_name, current in (("labels", self.labels), ("annotations", self.annotations)):
            stored = meta.get(field_name) or {}
            changed = {k: v for k, v in current.items() if stored.get(k) != v}
            if changed:
                patch[field_name] = changed
        return patch

    def status_patch(self) -> dict[str, Any]:
        """Top-level status fields changed by the steps (conditions as a whole list)."""
        stored = self.raw.get("status") or {}
        patch = {k: v for k, v in self.status.items() if stored.get(k) != v}
        if self.conditions.to_json() != list(stored.get("conditions") or []):
            patch["conditions"] = self.conditions.to_json()
        return patch
