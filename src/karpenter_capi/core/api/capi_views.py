"""Narrow read-only views of Cluster API objects: Machine, MachineDeployment, MachineSet and
MachinePool, accepting both the ``cluster.x-k8s.io/v1beta1`` and ``v1beta2`` shapes.

Clusters in the field run CAPI releases before and after v1.11, which introduced v1beta2, and a
management cluster serves whichever version the client asks for. The controller must read either
without caring, so each view accepts both and exposes the meaning, not the spelling:

- references: v1beta1 ``{apiVersion, kind, name, namespace}`` vs v1beta2
  ``{apiGroup, kind, name}``; ``ObjectReferenceView.group`` answers in both cases;
- conditions: v1beta1 keeps its own condition type in ``status.conditions`` and the new
  ``metav1.Condition`` ones in ``status.v1beta2.conditions``; v1beta2 swaps them (new ones in
  ``status.conditions``, old ones in ``status.deprecated.v1beta1.conditions``).
  ``condition()`` looks through both;
- replica counters: v1beta1 ``updatedReplicas`` became v1beta2 ``upToDateReplicas``.

``failureDomain``, ``providerID``, ``replicas`` and the template labels did not move.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from karpenter_capi.core.api.views import (
    ConditionView,
    LabelSelectorView,
    MetadataView,
    View,
    find,
)

V1BETA1 = "cluster.x-k8s.io/v1beta1"
V1BETA2 = "cluster.x-k8s.io/v1beta2"


class ObjectReferenceView(View):
    """A reference to an infrastructure or bootstrap object, in either CAPI version's shape."""

    api_version: str = ""
    api_group: str = ""
    kind: str = ""
    name: str = ""
    namespace: str = ""

    @property
    def group(self) -> str:
        """The API group, whichever field carried it."""
        if self.api_group:
            return self.api_group
        group, slash, _ = self.api_version.rpartition("/")
        return group if slash else ""


class MachineTaintView(View):
    """A taint a v1beta2 Machine template propagates to its Node."""

    key: str
    value: str = ""
    effect: str
    propagation: str = ""


class BootstrapView(View):
    config_ref: ObjectReferenceView | None = None
    data_secret_name: str | None = None


class MachineSpecView(View):
    cluster_name: str = ""
    provider_id: str = Field(default="", alias="providerID")
    infrastructure_ref: ObjectReferenceView | None = None
    bootstrap: BootstrapView | None = None
    failure_domain: str = ""
    version: str = ""
    taints: tuple[MachineTaintView, ...] = ()


class _ConditionList(View):
    conditions: tuple[ConditionView, ...] = ()


class _DeprecatedStatus(View):
    v1beta1: _ConditionList | None = Field(default=None, alias="v1beta1")


class NodeReferenceView(View):
    name: str = ""


class _WithConditions(View):
    """Status with conditions living in either era's place."""

    conditions: tuple[ConditionView, ...] = ()
    v1beta2: _ConditionList | None = Field(default=None, alias="v1beta2")
    deprecated: _DeprecatedStatus | None = None

    def condition(self, condition_type: str) -> ConditionView | None:
        """Look in ``status.conditions`` first, then in the other era's list."""
        found = find(self.conditions, condition_type)
        if found is not None:
            return found
        if self.v1beta2 is not None:
            found = find(self.v1beta2.conditions, condition_type)
            if found is not None:
                return found
        if self.deprecated is not None and self.deprecated.v1beta1 is not None:
            return find(self.deprecated.v1beta1.conditions, condition_type)
        return None


class MachineStatusView(_WithConditions):
    phase: str = ""
    node_ref: NodeReferenceView | None = None
    failure_reason: str | None = None
    failure_message: str | None = None


class MachineView(View):
    api_version: str = V1BETA1
    kind: str = "Machine"
    metadata: MetadataView = Field(default_factory=MetadataView)
    spec: MachineSpecView = Field(default_factory=MachineSpecView)
    status: MachineStatusView = Field(default_factory=MachineStatusView)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def node_name(self) -> str:
        return self.status.node_ref.name if self.status.node_ref else ""

    @property
    def is_deleting(self) -> bool:
        return self.metadata.deletion_timestamp is not None


# --- scalable resources -------------------------------------------------------------------------


class TemplateMetadataView(View):
    labels: Mapping[str, str] = Field(default_factory=dict)
    annotations: Mapping[str, str] = Field(default_factory=dict)


class MachineTemplateView(View):
    metadata: TemplateMetadataView = Field(default_factory=TemplateMetadataView)
    spec: MachineSpecView = Field(default_factory=MachineSpecView)


class ScalableStatusView(_WithConditions):
    replicas: int | None = None
    ready_replicas: int | None = None
    available_replicas: int | None = None
    updated_replicas: int | None = None
    up_to_date_replicas: int | None = None
    unavailable_replicas: int | None = None
    observed_generation: int | None = None
    phase: str = ""
    # The label selector in string form, as the scale subresource reports it.
    selector: str = ""
    node_refs: tuple[NodeReferenceView, ...] = ()

    @property
    def up_to_date(self) -> int | None:
        """Replicas on the current template, under either version's field name."""
        if self.up_to_date_replicas is not None:
            return self.up_to_date_replicas
        return self.updated_replicas


class _ScalableSpecView(View):
    cluster_name: str = ""
    replicas: int | None = None
    template: MachineTemplateView = Field(default_factory=MachineTemplateView)


class MachineDeploymentSpecView(_ScalableSpecView):
    selector: LabelSelectorView = Field(default_factory=LabelSelectorView)
    paused: bool = False


class MachineSetSpecView(_ScalableSpecView):
    selector: LabelSelectorView = Field(default_factory=LabelSelectorView)


class MachinePoolSpecView(_ScalableSpecView):
    failure_domains: tuple[str, ...] = ()
    provider_id_list: tuple[str, ...] = Field(default=(), alias="providerIDList")


class _ScalableView(View):
    """What every scalable resource offers: replicas, a Machine template, annotations."""

    api_version: str = V1BETA1
    kind: str = ""
    metadata: MetadataView = Field(default_factory=MetadataView)
    spec: _ScalableSpecView = Field(default_factory=_ScalableSpecView)
    status: ScalableStatusView = Field(default_factory=ScalableStatusView)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def replicas(self) -> int:
        """Desired replicas (CAPI defaults an unset count to 1 on create)."""
        replicas = self.spec.replicas
        return 1 if replicas is None else replicas

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.metadata.annotations

    @property
    def template_labels(self) -> Mapping[str, str]:
        return self.spec.template.metadata.labels

    @property
    def infrastructure_ref(self) -> ObjectReferenceView | None:
        return self.spec.template.spec.infrastructure_ref

    @property
    def failure_domain(self) -> str:
        return self.spec.template.spec.failure_domain

    @property
    def cluster_name(self) -> str:
        return self.spec.cluster_name or self.spec.template.spec.cluster_name


class MachineDeploymentView(_ScalableView):
    kind: str = "MachineDeployment"
    spec: MachineDeploymentSpecView = Field(default_factory=MachineDeploymentSpecView)


class MachineSetView(_ScalableView):
    kind: str = "MachineSet"
    spec: MachineSetSpecView = Field(default_factory=MachineSetSpecView)


class MachinePoolView(_ScalableView):
    kind: str = "MachinePool"
    spec: MachinePoolSpecView = Field(default_factory=MachinePoolSpecView)


ScalableResourceView = MachineDeploymentView | MachineSetView | MachinePoolView

_SCALABLE_BY_KIND: dict[str, type[_ScalableView]] = {
    "MachineDeployment": MachineDeploymentView,
    "MachineSet": MachineSetView,
    "MachinePool": MachinePoolView,
}


def scalable_view(obj: Mapping[str, Any]) -> ScalableResourceView:
    """Validate a raw MachineDeployment/MachineSet/MachinePool into its view, by ``kind``."""
    kind = obj.get("kind", "")
    view = _SCALABLE_BY_KIND.get(kind)
    if view is None:
        raise ValueError(f"not a Cluster API scalable resource: kind {kind!r}")
    result: ScalableResourceView = view.model_validate(obj)  # type: ignore[assignment]
    return result
