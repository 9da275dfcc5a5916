"""The narrow read-only view of a Pod that node termination reads while draining.

The drain decides, pod by pod, whether to wait, evict or delete (``core.termination.pods``):
it needs a pod's identity, owners, annotations, deletion time, priority class, tolerations,
grace period and phase, and nothing else. Validating those into a small frozen model keeps the
rules typed; every other field is ignored on input, which also keeps the view tolerant of
fields added by newer Kubernetes versions. It never rejects a value the API server accepted:
an operator or effect stays a plain string for the rules to interpret.

The scheduler, provisioner and disruption logic do not read pods through this view.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class View(BaseModel):
    """Base of the read-only views: frozen, camelCase, unknown fields ignored."""

    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


class OwnerReferenceView(View):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class MetadataView(View):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    annotations: Mapping[str, str] = Field(default_factory=dict)
    owner_references: tuple[OwnerReferenceView, ...] = ()
    deletion_timestamp: datetime | None = None


class TolerationView(View):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class PodSpecView(View):
    tolerations: tuple[TolerationView, ...] = ()
    priority_class_name: str = ""
    termination_grace_period_seconds: int | None = None


class PodStatusView(View):
    phase: str = ""


class PodView(View):
    metadata: MetadataView = Field(default_factory=MetadataView)
    spec: PodSpecView = Field(default_factory=PodSpecView)
    status: PodStatusView = Field(default_factory=PodStatusView)

    @property
    def is_terminal(self) -> bool:
        return self.status.phase in {"Succeeded", "Failed"}
