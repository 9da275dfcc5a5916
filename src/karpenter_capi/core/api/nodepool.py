"""``karpenter.sh/v1`` NodePool: what kinds of nodes may be launched, and when they may go.

Field for field the upstream Karpenter v1 API (``pkg/apis/v1/nodepool.go``), with its defaults
(``expireAfter: 720h``, ``consolidateAfter: 0s``, ``consolidationPolicy:
WhenEmptyOrUnderutilized``, one budget of ``10%``) and its validation (the CRD's OpenAPI and CEL
rules plus the webhook-era ``RuntimeValidate``: restricted label domains, duplicate taints), so
a manifest written for Karpenter is accepted or rejected here exactly as it would be there.

Budgets also carry the small amount of behaviour that only depends on the budget itself (is it
active now, how many nodes does a percentage allow) because every consumer needs the same answer.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, ClassVar

from croniter import croniter
from pydantic import ConfigDict, Field, field_validator, model_validator

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.duration import NEVER, Duration, NillableDuration, format_duration
from karpenter_capi.core.api.meta import (
    LABEL_VALUE_PATTERN,
    REQUIREMENTS_VALIDATIONS,
    Condition,
    KubeModel,
    NodeClassReference,
    NodeSelectorRequirementWithMinValues,
    ResourceList,
    Taint,
    TypedObject,
    find_condition,
)

BUDGET_NODES_PATTERN = r"^((100|[0-9]{1,2})%|[0-9]+)$"
BUDGET_SCHEDULE_PATTERN = (
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|"
    r"((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
)
BUDGET_DURATION_PATTERN = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"
DEFAULT_EXPIRE_AFTER = "720h"
DEFAULT_BUDGET_NODES = "10%"
# Bumped by upstream whenever the hashed template changes meaning; drift compares both.
NODEPOOL_HASH_VERSION = "v3"


class ConsolidationPolicy(StrEnum):
    WHEN_EMPTY = "WhenEmpty"
    WHEN_EMPTY_OR_UNDERUTILIZED = "WhenEmptyOrUnderutilized"
    BALANCED = "Balanced"


class DisruptionReason(StrEnum):
    UNDERUTILIZED = "Underutilized"
    EMPTY = "Empty"
    DRIFTED = "Drifted"


class NodePoolConditionType(StrEnum):
    VALIDATION_SUCCEEDED = "ValidationSucceeded"
    NODE_CLASS_READY = "NodeClassReady"
    NODE_REGISTRATION_HEALTHY = "NodeRegistrationHealthy"
    READY = "Ready"


# Upstream's CEL rules on template labels, verbatim, so the API server enforces them too.
_RESTRICTED_LABEL_RULES: list[dict[str, str]] = [
    {
        "message": 'label domain "kubernetes.io" is restricted',
        "rule": 'self.all(x, x in ["beta.kubernetes.io/instance-type", '
        '"failure-domain.beta.kubernetes.io/region", "beta.kubernetes.io/os", '
        '"beta.kubernetes.io/arch", "failure-domain.beta.kubernetes.io/zone", '
        '"topology.kubernetes.io/zone", "topology.kubernetes.io/region", "kubernetes.io/arch", '
        '"kubernetes.io/os", "node.kubernetes.io/windows-build"] || '
        'x.find("^([^/]+)").endsWith("node.kubernetes.io") || '
        'x.find("^([^/]+)").endsWith("node-restriction.kubernetes.io") || '
        '!x.find("^([^/]+)").endsWith("kubernetes.io"))',
    },
    {
        "message": 'label domain "k8s.io" is restricted',
        "rule": 'self.all(x, x.find("^([^/]+)").endsWith("kops.k8s.io") || '
        '!x.find("^([^/]+)").endsWith("k8s.io"))',
    },
    {
        "message": 'label domain "karpenter.sh" is restricted',
        "rule": 'self.all(x, x in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || '
        '!x.find("^([^/]+)").endsWith("karpenter.sh"))',
    },
    {
        "message": 'label "karpenter.sh/nodepool" is restricted',
        "rule": 'self.all(x, x != "karpenter.sh/nodepool")',
    },
    {
        "message": 'label "kubernetes.io/hostname" is restricted',
        "rule": 'self.all(x, x != "kubernetes.io/hostname")',
    },
]


# NodeClaims carry the nodepool requirement themselves; a NodePool template may not.
_TEMPLATE_KEY_RULES: list[dict[str, str]] = [
    {
        "message": 'label "karpenter.sh/nodepool" is restricted',
        "rule": "self.all(x, x.key != 'karpenter.sh/nodepool')",
    },
    {
        "message": 'label "kubernetes.io/hostname" is restricted',
        "rule": "self.all(x, x.key != 'kubernetes.io/hostname')",
    },
]


class Budget(KubeModel):
    """Limits how many of the NodePool's nodes may be disrupted at once, possibly on a schedule."""

    model_config = ConfigDict(json_schema_extra={"required": ["nodes"]})

    reasons: list[DisruptionReason] = Field(default_factory=list)
    """Disruption methods this budget applies to; all of them when unset."""
    nodes: Annotated[
        str,
        Field(pattern=BUDGET_NODES_PATTERN, json_schema_extra={"x-crd-default": "10%"}),
    ] = DEFAULT_BUDGET_NODES
    """Maximum number (or percentage) of the NodePool's nodes that may be disrupting at once."""
    schedule: Annotated[str | None, Field(pattern=BUDGET_SCHEDULE_PATTERN)] = None
    """Cron schedule (UTC) at which the budget becomes active; always active when unset."""
    duration: Annotated[
        Duration | None, Field(json_schema_extra={"pattern": BUDGET_DURATION_PATTERN})
    ] = None
    """How long the budget stays active after each schedule hit (minutes and hours only)."""

    @field_validator("schedule")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        if value is not None and not croniter.is_valid(value):
            raise ValueError(f"invalid cron schedule {value!r}")
        return value

    @field_validator("duration")
    @classmethod
    def _minutes_and_hours(cls, value: Duration | None) -> Duration | None:
        if value is not None and not re.fullmatch(BUDGET_DURATION_PATTERN, str(value)):
            raise ValueError(
                f"budget duration {str(value)!r} must be in minutes and/or hours such as '10m' "
                "or '1h30m' (cron has no seconds)"
            )
        return value

    @model_validator(mode="after")
    def _schedule_with_duration(self) -> Budget:
        if (self.schedule is None) != (self.duration is None):
            raise ValueError("'schedule' must be set with 'duration'")
        return self

    def is_active(self, now: datetime) -> bool:
        """Whether the budget applies at ``now`` (a schedule hit within the last duration)."""
        if self.schedule is None or self.duration is None:
            return True
        checkpoint = now - self.duration.value
        next_hit: datetime = croniter(self.schedule, checkpoint).get_next(datetime)
        return next_hit <= now

    def allowed_disruptions(self, total_nodes: int) -> int:
        """How many of ``total_nodes`` this budget allows to disrupt (percentages round up)."""
        if self.nodes.endswith("%"):
            return math.ceil(int(self.nodes[:-1]) * total_nodes / 100)
        return int(self.nodes)

    def applies_to(self, reason: DisruptionReason) -> bool:
        return not self.reasons or reason in self.reasons


def _default_budgets() -> list[Budget]:
    return [Budget(nodes=DEFAULT_BUDGET_NODES)]


class Disruption(KubeModel):
    """When and how the NodePool's nodes may be disrupted."""

    consolidate_after: NillableDuration
    """How long a node must be consolidatable before it is disrupted, or 'Never'."""
    consolidation_policy: Annotated[
        ConsolidationPolicy,
        Field(json_schema_extra={"x-crd-default": "WhenEmptyOrUnderutilized"}),
    ] = ConsolidationPolicy.WHEN_EMPTY_OR_UNDERUTILIZED
    """Which nodes consolidation may remove: only empty ones, or also underutilized ones."""
    budgets: Annotated[
        list[Budget],
        Field(
            max_length=50,
            json_schema_extra={
                "x-crd-default": [{"nodes": "10%"}],
                "x-kubernetes-validations": [
                    {
                        "message": "'schedule' must be set with 'duration'",
                        "rule": "self.all(x, has(x.schedule) == has(x.duration))",
                    }
                ],
            },
        ),
    ] = Field(default_factory=_default_budgets)
    """Budgets; the most restrictive active one wins. Defaults to one budget of 10%."""

    def allowed_disruptions(self, now: datetime, total_nodes: int, reason: DisruptionReason) -> int:
        """The most restrictive active budget's allowance for ``reason`` (upstream semantics)."""
        allowed = [
            b.allowed_disruptions(total_nodes)
            for b in self.budgets
            if b.applies_to(reason) and b.is_active(now)
        ]
        return min(allowed, default=total_nodes)


class NodeClaimTemplateMetadata(KubeModel):
    labels: Annotated[
        dict[str, Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]],
        Field(
            max_length=100,
            json_schema_extra={"x-kubernetes-validations": _RESTRICTED_LABEL_RULES},
        ),
    ] = Field(default_factory=dict)
    """Labels applied to every NodeClaim and Node launched from the NodePool."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Annotations applied to every NodeClaim and Node launched from the NodePool."""


class NodeClaimTemplateSpec(KubeModel):
    """The NodeClaim spec a NodePool stamps out (without resource requests)."""

    taints: list[Taint] = Field(default_factory=list)
    """Taints applied to the node."""
    startup_taints: list[Taint] = Field(default_factory=list)
    """Taints expected to be removed by a daemon after startup; ignored when provisioning."""
    requirements: Annotated[
        list[NodeSelectorRequirementWithMinValues],
        Field(
            max_length=100,
            json_schema_extra={
                "x-kubernetes-validations": REQUIREMENTS_VALIDATIONS + _TEMPLATE_KEY_RULES
            },
        ),
    ]
    """Constraints on the node's labels (instance type, zone, capacity type, ...)."""
    node_class_ref: NodeClassReference
    """The provider-specific configuration (ClusterAPINodeClass) used to launch nodes."""
    termination_grace_period: Duration | None = None
    """Longest time draining may take before pods are forcibly deleted; unlimited when unset."""
    expire_after: Annotated[
        NillableDuration, Field(json_schema_extra={"x-crd-default": DEFAULT_EXPIRE_AFTER})
    ] = Field(default_factory=lambda: NillableDuration(DEFAULT_EXPIRE_AFTER))
    """Age at which a node is replaced, or 'Never'."""


class NodeClaimTemplate(KubeModel):
    metadata: NodeClaimTemplateMetadata = Field(default_factory=NodeClaimTemplateMetadata)
    spec: NodeClaimTemplateSpec


def _taint_conflicts(spec: NodeClaimTemplateSpec, path: str) -> list[str]:
    seen: set[tuple[str, str]] = set()
    problems: list[str] = []
    for field, taints in (("taints", spec.taints), ("startupTaints", spec.startup_taints)):
        for index, taint in enumerate(taints):
            identity = (taint.key, taint.effect.value)
            if identity in seen:
                problems.append(
                    f"{path}.{field}[{index}]: duplicate taint {taint.key}:{taint.effect.value}"
                )
            seen.add(identity)
    return problems


def requirement_key_problems(
    requirements: list[NodeSelectorRequirementWithMinValues], path: str, *, allow_nodepool: bool
) -> list[str]:
    """Restricted-domain violations among requirement keys, each prefixed with its field path."""
    problems = []
    for index, requirement in enumerate(requirements):
        key = requirement.key
        if key == wellknown.LABEL_NODEPOOL and not allow_nodepool:
            problems.append(f"{path}[{index}].key: {key} is restricted")
            continue
        reason = wellknown.restricted_label_reason(key)
        if reason:
            problems.append(f"{path}[{index}].key: {reason}")
    return problems


class NodePoolSpec(KubeModel):
    template: NodeClaimTemplate
    """The template of NodeClaims launched from this NodePool."""
    disruption: Annotated[
        Disruption, Field(json_schema_extra={"x-crd-default": {"consolidateAfter": "0s"}})
    ] = Field(default_factory=lambda: Disruption(consolidate_after=NillableDuration("0s")))
    """Disruption (expiry, consolidation, budgets) settings."""
    limits: ResourceList = Field(default_factory=dict)
    """Upper bounds on the total resources of all nodes launched from this NodePool."""
    weight: Annotated[int | None, Field(ge=1, le=100, json_schema_extra={"format": "int32"})] = None
    """Priority among NodePools; higher weights are tried first."""
    replicas: Annotated[int | None, Field(ge=0, json_schema_extra={"format": "int64"})] = None
    """A fixed node count (static NodePool) instead of provisioning for pending pods."""

    @model_validator(mode="after")
    def _runtime_validate(self) -> NodePoolSpec:
        problems: list[str] = []
        for key in self.template.metadata.labels:
            path = f"spec.template.metadata.labels[{key!r}]"
            if key == wellknown.LABEL_NODEPOOL:
                problems.append(f"{path}: label {key!r} is restricted")
                continue
            if key == wellknown.LABEL_HOSTNAME:
                problems.append(f"{path}: label {key!r} is restricted")
                continue
            reason = wellknown.restricted_label_reason(key)
            if reason:
                problems.append(f"{path}: {reason}")
        problems += _taint_conflicts(self.template.spec, "spec.template.spec")
        problems += requirement_key_problems(
            self.template.spec.requirements,
            "spec.template.spec.requirements",
            allow_nodepool=False,
        )
        if problems:
            raise ValueError("; ".join(problems))
        return self


class NodePoolStatus(KubeModel):
    resources: ResourceList = Field(default_factory=dict)
    """Resources of all nodes launched from this NodePool (and their count, as 'nodes')."""
    nodes: Annotated[int | None, Field(json_schema_extra={"format": "int64"})] = None
    """Number of nodes launched from this NodePool."""
    node_class_observed_generation: Annotated[
        int | None, Field(json_schema_extra={"format": "int64"})
    ] = None
    """The NodeClass generation the conditions were computed against."""
    conditions: list[Condition] = Field(default_factory=list)
    """Signals for health and readiness."""


class NodePool(TypedObject):
    """NodePool is the Schema for the NodePools API."""

    API_VERSION: ClassVar[str] = wellknown.KARPENTER_API_VERSION
    KIND: ClassVar[str] = "NodePool"

    spec: NodePoolSpec
    status: NodePoolStatus = Field(default_factory=NodePoolStatus)

    def condition(self, condition_type: str) -> Condition | None:
        return find_condition(self.status.conditions, condition_type)

    @property
    def weight(self) -> int:
        """Weight for ordering; an unset weight orders as 0, like upstream."""
        return self.spec.weight or 0

    @property
    def is_static(self) -> bool:
        """``spec.replicas`` is set: the pool keeps that many nodes, whatever the pods need."""
        return self.spec.replicas is not None

    def template_hash(self) -> str:
        """A stable digest of what drift compares (``karpenter.sh/nodepool-hash``).

        Like upstream, requirements are left out (they drift by label comparison instead),
        taints compare as sets, and durations by value, so ``720h`` and ``720h0m0s`` hash alike.
        The digest is ours, not byte-compatible with Go's hashstructure.
        """
        template = self.spec.template.model_dump(mode="json")
        spec = template["spec"]
        spec.pop("requirements", None)
        for key in ("taints", "startupTaints"):
            if key in spec:
                spec[key] = sorted(spec[key], key=lambda t: json.dumps(t, sort_keys=True))
        spec["expireAfter"] = _canonical(self.spec.template.spec.expire_after.value)
        grace = self.spec.template.spec.termination_grace_period
        if grace is not None:
            spec["terminationGracePeriod"] = _canonical(grace.value)
        text = json.dumps(template, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).digest()
        return str(int.from_bytes(digest[:8], "big"))


def _canonical(value: timedelta | None) -> str:
    return NEVER if value is None else format_duration(value)


def order_by_weight(nodepools: list[NodePool]) -> list[NodePool]:
    """Highest weight first; ties broken by name, later names first (upstream ``OrderByWeight``)."""
    return sorted(nodepools, key=lambda np: (np.weight, np.name), reverse=True)


def nodepool_json(
    name: str,
    *,
    requirements: list[dict[str, Any]] | None = None,
    node_class: str = "default",
) -> dict[str, Any]:
    """A minimal valid NodePool manifest; tests and the simulator start from it."""
    return {
        "apiVersion": wellknown.KARPENTER_API_VERSION,
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "requirements": requirements or [],
                    "nodeClassRef": {
                        "group": wellknown.NODECLASS_GROUP,
                        "kind": wellknown.NODECLASS_KIND,
                        "name": node_class,
                    },
                }
            }
        },
    }
