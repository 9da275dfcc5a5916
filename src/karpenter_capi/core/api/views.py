"""Narrow read-only views of the core objects the controller reads: Pod and Node.

A cluster holds thousands of pods and the controller re-reads them on every scheduling pass, so
it validates raw API JSON into these small frozen models instead of the official client's
generated ones (docs/design.md, decision 10). Only the fields the scheduler, provisioner and
disruption logic look at are modelled; everything else is ignored on input, which also keeps
the views tolerant of fields added by newer Kubernetes versions.

Views never reject a value the API server accepted: operators and effects stay plain strings
(the scheduling code decides what it understands) and quantities stay as their text.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

from karpenter_capi.core.kube.selectors import SelectorError, compile_parts


def _quantity_text(raw: Any) -> Any:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return str(raw)
    return raw


QuantityText = Annotated[str, BeforeValidator(_quantity_text)]
Resources = Mapping[str, QuantityText]


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
    resource_version: str = ""
    generation: int = 0
    labels: Mapping[str, str] = Field(default_factory=dict)
    annotations: Mapping[str, str] = Field(default_factory=dict)
    owner_references: tuple[OwnerReferenceView, ...] = ()
    finalizers: tuple[str, ...] = ()
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None

    def controller_ref(self) -> OwnerReferenceView | None:
        return next((ref for ref in self.owner_references if ref.controller), None)


class ConditionView(View):
    type: str
    status: str = "Unknown"
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None


def find(conditions: tuple[ConditionView, ...], condition_type: str) -> ConditionView | None:
    return next((c for c in conditions if c.type == condition_type), None)


# --- scheduling constraints ---------------------------------------------------------------------


class NodeSelectorRequirementView(View):
    key: str
    operator: str
    values: tuple[str, ...] = ()


class NodeSelectorTermView(View):
    match_expressions: tuple[NodeSelectorRequirementView, ...] = ()
    match_fields: tuple[NodeSelectorRequirementView, ...] = ()


class NodeSelectorView(View):
    node_selector_terms: tuple[NodeSelectorTermView, ...] = ()


class PreferredSchedulingTermView(View):
    weight: int
    preference: NodeSelectorTermView


class NodeAffinityView(View):
    required_during_scheduling_ignored_during_execution: NodeSelectorView | None = None
    preferred_during_scheduling_ignored_during_execution: tuple[
        PreferredSchedulingTermView, ...
    ] = ()

    @property
    def required(self) -> tuple[NodeSelectorTermView, ...]:
        hard = self.required_during_scheduling_ignored_during_execution
        return hard.node_selector_terms if hard else ()

    @property
    def preferred(self) -> tuple[PreferredSchedulingTermView, ...]:
        return self.preferred_during_scheduling_ignored_during_execution


class LabelSelectorRequirementView(View):
    key: str
    operator: str
    values: tuple[str, ...] = ()


class LabelSelectorView(View):
    match_labels: Mapping[str, str] = Field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirementView, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes label-selector semantics; a malformed selector (an unknown operator, say)
        matches nothing, as kube-scheduler treats it."""
        try:
            selector = compile_parts(
                self.match_labels, ((e.key, e.operator, e.values) for e in self.match_expressions)
            )
        except SelectorError:
            return False
        return selector.matches(labels)


class PodAffinityTermView(View):
    label_selector: LabelSelectorView | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelectorView | None = None
    topology_key: str = ""
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()


class WeightedPodAffinityTermView(View):
    weight: int
    pod_affinity_term: PodAffinityTermView


class PodAffinityView(View):
    required_during_scheduling_ignored_during_execution: tuple[PodAffinityTermView, ...] = ()
    preferred_during_scheduling_ignored_during_execution: tuple[
        WeightedPodAffinityTermView, ...
    ] = ()

    @property
    def required(self) -> tuple[PodAffinityTermView, ...]:
        return self.required_during_scheduling_ignored_during_execution

    @property
    def preferred(self) -> tuple[WeightedPodAffinityTermView, ...]:
        return self.preferred_during_scheduling_ignored_during_execution


class AffinityView(View):
    node_affinity: NodeAffinityView | None = None
    pod_affinity: PodAffinityView | None = None
    pod_anti_affinity: PodAffinityView | None = None


class TolerationView(View):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class TopologySpreadConstraintView(View):
    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    label_selector: LabelSelectorView | None = None
    min_domains: int | None = None
    node_affinity_policy: str | None = None
    node_taints_policy: str | None = None
    match_label_keys: tuple[str, ...] = ()


# --- pods ---------------------------------------------------------------------------------------


class ResourceRequirementsView(View):
    requests: Resources = Field(default_factory=dict)
    limits: Resources = Field(default_factory=dict)


class ContainerPortView(View):
    container_port: int = 0
    host_port: int | None = None
    host_ip: str | None = Field(default=None, alias="hostIP")
    protocol: str = "TCP"


class ContainerView(View):
    name: str = ""
    resources: ResourceRequirementsView = Field(default_factory=ResourceRequirementsView)
    ports: tuple[ContainerPortView, ...] = ()
    # "Always" on an init container makes it a sidecar that keeps its resources.
    restart_policy: str | None = None


class PodSpecView(View):
    node_name: str = ""
    node_selector: Mapping[str, str] = Field(default_factory=dict)
    affinity: AffinityView | None = None
    tolerations: tuple[TolerationView, ...] = ()
    topology_spread_constraints: tuple[TopologySpreadConstraintView, ...] = ()
    containers: tuple[ContainerView, ...] = ()
    init_containers: tuple[ContainerView, ...] = ()
    overhead: Resources = Field(default_factory=dict)
    priority: int | None = None
    priority_class_name: str = ""
    scheduler_name: str = "default-scheduler"
    preemption_policy: str | None = None
    termination_grace_period_seconds: int | None = None


class PodStatusView(View):
    phase: str = ""
    conditions: tuple[ConditionView, ...] = ()
    nominated_node_name: str = ""


class PodView(View):
    metadata: MetadataView = Field(default_factory=MetadataView)
    spec: PodSpecView = Field(default_factory=PodSpecView)
    status: PodStatusView = Field(default_factory=PodStatusView)

    @property
    def key(self) -> str:
        """``namespace/name``, the key informers and work queues use."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    def condition(self, condition_type: str) -> ConditionView | None:
        return find(self.status.conditions, condition_type)

    @property
    def is_terminal(self) -> bool:
        return self.status.phase in {"Succeeded", "Failed"}

    @property
    def host_ports(self) -> tuple[ContainerPortView, ...]:
        return tuple(
            port
            for container in (*self.spec.init_containers, *self.spec.containers)
            for port in container.ports
            if port.host_port
        )


# --- nodes --------------------------------------------------------------------------------------


class TaintView(View):
    key: str
    value: str = ""
    effect: str
    time_added: datetime | None = None


class NodeSpecView(View):
    provider_id: str = Field(default="", alias="providerID")
    taints: tuple[TaintView, ...] = ()
    unschedulable: bool = False


class NodeStatusView(View):
    capacity: Resources = Field(default_factory=dict)
    allocatable: Resources = Field(default_factory=dict)
    conditions: tuple[ConditionView, ...] = ()


class NodeView(View):
    metadata: MetadataView = Field(default_factory=MetadataView)
    spec: NodeSpecView = Field(default_factory=NodeSpecView)
    status: NodeStatusView = Field(default_factory=NodeStatusView)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def labels(self) -> Mapping[str, str]:
        return self.metadata.labels

    def condition(self, condition_type: str) -> ConditionView | None:
        return find(self.status.conditions, condition_type)

    @property
    def is_ready(self) -> bool:
        ready = self.condition("Ready")
        return ready is not None and ready.status == "True"
