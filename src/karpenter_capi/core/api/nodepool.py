"""``karpenter.sh/v1`` NodePool: what kinds of nodes may be launched, and when they may go.

Field for field the upstream Karpenter v1 API (``pkg/apis/v1/nodepool.go``), with its defaults
(``expireAfter: 720h``, ``consolidateAfter: 0s``, ``consolidationPolicy:
WhenEmptyOrUnderutilized``, one budget of ``10%``) and its admission rules (the CRD's OpenAPI
schema and CEL rules, checked again in Python by the validators here), so a manifest written for
Karpenter is admitted or refused here exactly as it would be there, and one the API server
admitted always parses. Upstream's ``RuntimeValidate`` (qualified label keys, duplicate taints,
well-known values), which only makes a NodePool not ready, is ``runtime_validation.py``.

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
from typing import Annotated, Any, ClassVar, Final

from croniter import croniter
from pydantic import ConfigDict, Field, JsonValue, field_validator, model_validator

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.duration import NEVER, Duration, NillableDuration, format_duration
from karpenter_capi.core.api.meta import (
    ATOMIC_LIST,
    CONDITIONS_LIST_MAP,
    HOSTNAME_LABEL_RULE,
    KARPENTER_DOMAIN_RULE,
    LABEL_VALUE_PATTERN,
    NODEPOOL_LABEL_RULE,
    REQUIREMENTS_LIST,
    Condition,
    KubeModel,
    NodeClassReference,
    NodeSelectorRequirementWithMinValues,
    ResourceList,
    Taint,
    TypedObject,
    find_condition,
    requirement_key_field,
    restricted_key_refusals,
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


# Upstream's CEL rules on template labels, verbatim; ``_label_refusals`` is the same in Python.
_TEMPLATE_LABEL_RULES: list[dict[str, str]] = [
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

# A NodePool is static (``replicas``) or dynamic for life; a static one takes no resource limits
# but ``nodes`` and no weight (upstream's rules, verbatim).
_STATIC_RULES: list[JsonValue] = [
    {
        "message": "Cannot transition NodePool between static (replicas set) and dynamic "
        "(replicas unset) provisioning modes",
        "rule": "has(self.replicas) == has(oldSelf.replicas)",
    },
    {
        "message": "only 'limits.nodes' is supported on static NodePools",
        "rule": "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || "
        "(size(self.limits) == 1 && 'nodes' in self.limits))",
    },
    {
        "message": "'weight' is not supported on static NodePools",
        "rule": "!has(self.replicas) || !has(self.weight)",
    },
]

_STATIC_MESSAGES = [str(rule["message"]) for rule in _STATIC_RULES if isinstance(rule, dict)]


class Budget(KubeModel):
    """Limits how many of the NodePool's nodes may be disrupted at once, possibly on a schedule."""

    model_config = ConfigDict(json_schema_extra={"required": ["nodes"]})

    reasons: Annotated[
        list[DisruptionReason],
        Field(max_length=50, json_schema_extra={"x-kubernetes-list-type": "set"}),
    ] = Field(default_factory=list)
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

    @field_validator("reasons")
    @classmethod
    def _reasons_are_a_set(cls, value: list[DisruptionReason]) -> list[DisruptionReason]:
        duplicates = sorted({r.value for r in value if value.count(r) > 1})
        if duplicates:
            raise ValueError(f"duplicate reasons: {', '.join(duplicates)}")
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

    @property
    def schedule_problem(self) -> str | None:
        """Why the schedule cannot be read as cron, or None.

        The CRD's pattern only checks the shape (five fields or a macro), as upstream's does, so
        a schedule such as ``a b c d e`` is admitted; like upstream, such a budget then allows
        no disruption at all (it fails closed) and says why.
        """
        if self.schedule is None or croniter.is_valid(self.schedule):
            return None
        return f"budget schedule {self.schedule!r} is not a valid cron expression"

    def is_active(self, now: datetime) -> bool:
        """Whether the budget applies at ``now`` (a schedule hit within the last duration)."""
        if self.schedule is None or self.duration is None:
            return True
        if self.schedule_problem:
            return True
        checkpoint = now - self.duration.value
        next_hit: datetime = croniter(self.schedule, checkpoint).get_next(datetime)
        return next_hit <= now

    def allowed_disruptions(self, total_nodes: int) -> int:
        """How many of ``total_nodes`` this budget allows to disrupt (percentages round up)."""
        if self.schedule_problem:
            return 0
        if self.nodes.endswith("%"):
            return math.ceil(int(self.nodes[:-1]) * total_nodes / 100)
        return int(self.nodes)

    def applies_to(self, reason: DisruptionReason) -> bool:
        return not self.reasons or reason in self.reasons


def _default_budgets() -> list[Budget]:
    return [Budget(nodes=DEFAULT_BUDGET_NODES)]


class Disruption(KubeModel):
    """When and how the NodePool's nodes may be disrupted."""

    consolidate_after: Annotated[
        NillableDuration, Field(json_schema_extra={"x-crd-default": "0s"})
    ] = Field(default_factory=lambda: NillableDuration("0s"))
    """How long a node must be consolidatable before it is disrupted, or 'Never'.

    Ignored on static NodePools."""
    consolidation_policy: Annotated[
        ConsolidationPolicy,
        Field(json_schema_extra={"x-crd-default": "WhenEmptyOrUnderutilized"}),
    ] = ConsolidationPolicy.WHEN_EMPTY_OR_UNDERUTILIZED
    """Which nodes consolidation may remove: only empty ones, also underutilized ones, or
    underutilized ones only where the savings outweigh the disruption (Balanced). Ignored on
    static NodePools."""
    budgets: Annotated[
        list[Budget],
        Field(
            max_length=50,
            json_schema_extra={
                "x-crd-default": [{"nodes": "10%"}],
                "x-kubernetes-list-type": "atomic",
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
        """The most restrictive active budget's allowance for ``reason`` (upstream semantics).

        A budget whose schedule is not valid cron blocks every disruption of the pool, whatever
        its reasons, as upstream's ``MustGetAllowedDisruptions`` does.
        """
        if any(b.schedule_problem for b in self.budgets):
            return 0
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
            json_schema_extra={
                "x-kubernetes-map-type": "atomic",
                "x-kubernetes-validations": _TEMPLATE_LABEL_RULES,
            },
        ),
    ] = Field(default_factory=dict)
    """Labels applied to every NodeClaim and Node launched from the NodePool."""
    annotations: Annotated[
        dict[str, str], Field(json_schema_extra={"x-kubernetes-map-type": "granular"})
    ] = Field(default_factory=dict)
    """Annotations applied to every NodeClaim and Node launched from the NodePool."""

    @field_validator("labels")
    @classmethod
    def _restricted_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        problems = [
            f"{key}: {refusal}"
            for key in labels
            for refusal in restricted_key_refusals(key, allow_nodepool=False)
        ]
        if problems:
            raise ValueError("; ".join(problems))
        return labels


class NodePoolRequirement(NodeSelectorRequirementWithMinValues):
    """A requirement in a NodePool template: ``karpenter.sh/nodepool`` is refused too."""

    ALLOWS_NODEPOOL_KEY: ClassVar[bool] = False

    key: Annotated[
        str,
        requirement_key_field(KARPENTER_DOMAIN_RULE, NODEPOOL_LABEL_RULE, HOSTNAME_LABEL_RULE),
    ]
    """The label key that the selector applies to."""


class NodePoolNodeClassReference(NodeClassReference):
    """A NodePool's nodeClassRef: its group and kind may not change once set (upstream)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "message": "nodeClassRef.group is immutable",
                    "rule": "self.group == oldSelf.group",
                },
                {"message": "nodeClassRef.kind is immutable", "rule": "self.kind == oldSelf.kind"},
            ]
        }
    )


class NodeClaimTemplateSpec(KubeModel):
    """The NodeClaim spec a NodePool stamps out (without resource requests)."""

    taints: Annotated[list[Taint], Field(json_schema_extra=ATOMIC_LIST)] = Field(
        default_factory=list
    )
    """Taints applied to the node."""
    startup_taints: Annotated[list[Taint], Field(json_schema_extra=ATOMIC_LIST)] = Field(
        default_factory=list
    )
    """Taints expected to be removed by a daemon after startup; ignored when provisioning."""
    requirements: Annotated[
        list[NodePoolRequirement],
        Field(max_length=100, json_schema_extra=REQUIREMENTS_LIST),
    ]
    """Constraints on the node's labels (instance type, zone, capacity type, ...)."""
    node_class_ref: NodePoolNodeClassReference
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


class NodePoolSpec(KubeModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _STATIC_RULES})

    template: NodeClaimTemplate
    """The template of NodeClaims launched from this NodePool."""
    disruption: Annotated[
        Disruption, Field(json_schema_extra={"x-crd-default": {"consolidateAfter": "0s"}})
    ] = Field(default_factory=Disruption)
    """Disruption (expiry, consolidation, budgets) settings."""
    limits: ResourceList = Field(default_factory=dict)
    """Upper bounds on the total resources of all nodes launched from this NodePool; only
    ``nodes`` on a static NodePool."""
    weight: Annotated[int | None, Field(ge=1, le=100, json_schema_extra={"format": "int32"})] = None
    """Priority among NodePools; higher weights are tried first. Not on static NodePools."""
    replicas: Annotated[int | None, Field(ge=0, json_schema_extra={"format": "int64"})] = None
    """A fixed node count (static NodePool) instead of provisioning for pending pods."""

    @model_validator(mode="after")
    def _static_rules(self) -> NodePoolSpec:
        # The two non-transition rules of _STATIC_RULES; the transition one needs the old object
        # and is the API server's alone.
        if self.replicas is not None:
            if set(self.limits) - {"nodes"}:
                raise ValueError(_STATIC_MESSAGES[1])
            if self.weight is not None:
                raise ValueError(_STATIC_MESSAGES[2])
        return self


class NodePoolStatus(KubeModel):
    resources: ResourceList = Field(default_factory=dict)
    """Resources of all nodes launched from this NodePool (and their count, as 'nodes')."""
    nodes: Annotated[
        int | None, Field(json_schema_extra={"format": "int64", "x-crd-default": 0})
    ] = None
    """Number of nodes launched from this NodePool."""
    node_class_observed_generation: Annotated[
        int | None, Field(json_schema_extra={"format": "int64"})
    ] = None
    """The NodeClass generation the conditions were computed against."""
    conditions: Annotated[list[Condition], Field(json_schema_extra=CONDITIONS_LIST_MAP)] = Field(
        default_factory=list
    )
    """Signals for health and readiness."""


# This project's one rule beyond upstream's NodePool CRD: the name becomes the
# karpenter.sh/nodepool label value of every NodeClaim and Node, which kube caps at 63
# characters, so a longer name is a NodePool no Karpenter can launch for (every NodeClaim create
# is refused). Runtime validation says the same of NodePools admitted before this rule.
_NAME_RULE: Final[dict[str, JsonValue]] = {
    "message": f"name must be no more than 63 characters: it is the {wellknown.LABEL_NODEPOOL} "
    "label value of the NodePool's NodeClaims and Nodes",
    "rule": "self.metadata.name.size() <= 63",
}


class NodePool(TypedObject):
    """NodePool is the Schema for the NodePools API."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_NAME_RULE]})

    API_VERSION: ClassVar[str] = wellknown.KARPENTER_API_VERSION
    KIND: ClassVar[str] = "NodePool"

    spec: NodePoolSpec
    status: NodePoolStatus = Field(default_factory=NodePoolStatus)

    def condition(self, condition_type: str) -> Condition | None:
        return find_condition(self.status.conditions, condition_type)

    @property
    def is_static(self) -> bool:
        """A static NodePool keeps ``spec.replicas`` nodes instead of following pending pods."""
        return self.spec.replicas is not None

    @property
    def weight(self) -> int:
        """Weight for ordering; an unset weight orders as 0, like upstream."""
        return self.spec.weight or 0

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
