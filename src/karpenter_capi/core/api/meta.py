"""Shared building blocks of the Karpenter-compatible API: metadata, conditions, taints,
requirements, references, label selectors and resource lists.

They live apart from NodePool and NodeClaim because both (and the ClusterAPINodeClass) embed
them, and because ``crds.py`` turns their JSON schema into the CRDs: the constraints declared
here (enums, patterns, bounds) are enforced twice, once when Python validates an object and once
by the API server through the generated CRD, so the two can never disagree.

``KubeModel`` fixes the wire conventions once: camelCase keys, dumping by alias, unknown fields
dropped (the API server prunes them too) and, like Go's ``omitempty``, unset or empty optional
fields left out of the output so an object read and written back is unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    ValidationError,
    WithJsonSchema,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from karpenter_capi.core.clock import format_timestamp
from karpenter_capi.core.values.selectors import compile_parts

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
# Upstream's pattern for label keys and taints: a lower-case DNS prefix, then the name part.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?"
    r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
)
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
# NodeClaim conditions (operatorpkg's) may carry an empty reason.
OPTIONAL_CONDITION_REASON_PATTERN = r"^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$"


def _quantity_text(raw: Any) -> Any:
    # YAML lets users write `cpu: 4`; the API server stores quantities as strings.
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int | float):
        return str(raw)
    return raw


Quantity = Annotated[
    str,
    BeforeValidator(_quantity_text),
    Field(pattern=QUANTITY_PATTERN),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
"""A Kubernetes resource quantity (``500m``, ``4Gi``), carried as its text."""

ResourceList = dict[str, Quantity]


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


Timestamp = Annotated[
    datetime, AfterValidator(_utc), PlainSerializer(format_timestamp, return_type=str)
]
"""A ``metav1.Time``: aware UTC in Python, RFC 3339 with a ``Z`` on the wire (even in
``model_dump()``'s Python mode, so dumps are plain JSON-ready data)."""


def validation_problems(error: ValidationError) -> list[str]:
    """One ``path: reason`` line per problem (``spec.requirements[0].minValues: ...``), for
    status conditions and Events that tell a user what to fix."""
    problems = []
    for item in error.errors():
        path = ""
        for part in item["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        message = item["msg"].removeprefix("Value error, ")
        problems.append(f"{path}: {message}" if path else message)
    return problems


class KubeModel(BaseModel):
    """Base of every API model: camelCase on the wire, Go ``omitempty`` semantics on output.

    ``model_dump()`` therefore already is API JSON: no ``null``, no empty optional containers,
    enums as plain strings, timestamps as RFC 3339 text. Frozen: an object read once is handed
    to every reader (the plugins' hooks among them), so nobody may assign to its fields.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="ignore",
        use_attribute_docstrings=True,
        frozen=True,
    )

    @model_serializer(mode="wrap")
    def _omit_empty(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        for name, info in type(self).model_fields.items():
            alias = info.serialization_alias or info.alias or name
            key = alias if alias in data else name
            if key not in data:
                continue
            value = data[key]
            # Go's omitempty: an unset optional field is absent, never null/{}/[].
            if not info.is_required() and (
                value is None or (isinstance(value, dict | list) and not value)
            ):
                del data[key]
            # Plain str instead of StrEnum members, so yaml.safe_dump and friends accept it.
            elif isinstance(value, StrEnum):
                data[key] = value.value
            elif isinstance(value, list) and value and isinstance(value[0], StrEnum):
                data[key] = [item.value for item in value]
        return data


class OwnerReference(KubeModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KubeModel):
    """Standard object metadata; fields not modelled (managedFields, ...) are kept as-is."""

    model_config = ConfigDict(extra="allow")

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Timestamp | None = None
    deletion_timestamp: Timestamp | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[OwnerReference] = Field(default_factory=list)


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(KubeModel):
    """A status condition, as metav1.Condition (what Karpenter's operatorpkg writes)."""

    model_config = ConfigDict(
        json_schema_extra={
            "required": ["lastTransitionTime", "message", "reason", "status", "type"]
        }
    )

    type: Annotated[str, Field(max_length=316, pattern=CONDITION_TYPE_PATTERN)]
    """Type of condition in CamelCase."""
    status: ConditionStatus
    """Status of the condition: True, False or Unknown."""
    observed_generation: Annotated[
        int | None, Field(ge=0, json_schema_extra={"format": "int64"})
    ] = None
    """The .metadata.generation that the condition was set based upon."""
    last_transition_time: Timestamp
    """The last time the condition transitioned from one status to another."""
    reason: Annotated[str, Field(min_length=1, max_length=1024, pattern=CONDITION_REASON_PATTERN)]
    """A programmatic identifier for the reason of the last transition, in CamelCase."""
    message: Annotated[str, Field(max_length=32768)] = ""
    """A human readable message with details about the transition."""

    @property
    def is_true(self) -> bool:
        return self.status is ConditionStatus.TRUE


class LooseCondition(Condition):
    """A NodeClaim condition: upstream's schema lets ``reason`` and ``message`` be empty."""

    model_config = ConfigDict(
        json_schema_extra={"required": ["lastTransitionTime", "status", "type"]}
    )

    reason: Annotated[str, Field(max_length=1024, pattern=OPTIONAL_CONDITION_REASON_PATTERN)] = ""
    """A programmatic identifier for the reason of the last transition, in CamelCase."""


# Lists a merge replaces whole (upstream marks taints and requirements so).
ATOMIC_LIST: dict[str, Any] = {"x-kubernetes-list-type": "atomic"}
# Conditions are a list keyed by type, so a server-side apply or merge touches one of them.
CONDITIONS_LIST_MAP: dict[str, Any] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}


def find_condition(conditions: Sequence[Condition], condition_type: str) -> Condition | None:
    """The condition of ``condition_type`` in a status, or None."""
    return next((c for c in conditions if c.type == condition_type), None)


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Taint(KubeModel):
    """A node taint (``core/v1 Taint``)."""

    key: Annotated[str, Field(min_length=1, pattern=LABEL_KEY_PATTERN)]
    # Upstream's CRD holds taint values to the label-key pattern (stricter than a label value).
    value: Annotated[str | None, Field(pattern=LABEL_KEY_PATTERN)] = None
    effect: TaintEffect
    time_added: Timestamp | None = None

    def matches(self, other: Taint) -> bool:
        """Same identity as ``other`` (key and effect), like ``Taint.MatchTaint``."""
        return self.key == other.key and self.effect == other.effect


class NodeSelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"
    GTE = "Gte"
    LTE = "Lte"


_NUMERIC_OPERATORS = frozenset(
    {NodeSelectorOperator.GT, NodeSelectorOperator.LT}
    | {NodeSelectorOperator.GTE, NodeSelectorOperator.LTE}
)


_INTEGER = re.compile(r"[+-]?[0-9]+")
_FIRST_SEGMENT = re.compile(r"^([^/]+)")

# Upstream's CEL rules on requirement keys, verbatim, and the same checks in Python below.
KARPENTER_DOMAIN_RULE: dict[str, str] = {
    "message": 'label domain "karpenter.sh" is restricted',
    "rule": 'self in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || '
    '!self.find("^([^/]+)").endsWith("karpenter.sh")',
}
NODEPOOL_LABEL_RULE: dict[str, str] = {
    "message": 'label "karpenter.sh/nodepool" is restricted',
    "rule": 'self != "karpenter.sh/nodepool"',
}
HOSTNAME_LABEL_RULE: dict[str, str] = {
    "message": 'label "kubernetes.io/hostname" is restricted',
    "rule": 'self != "kubernetes.io/hostname"',
}


def restricted_key_refusals(key: str, *, allow_nodepool: bool) -> list[str]:
    """The messages of the key rules above that ``key`` breaks, exactly as CEL evaluates them.

    ``find("^([^/]+)")`` is the text before the first ``/`` (empty when the key starts with one),
    and ``endsWith`` is a plain suffix test, so ``notkarpenter.sh/x`` is refused as upstream does.
    """
    refusals = []
    match = _FIRST_SEGMENT.match(key)
    domain = match.group(1) if match else ""
    allowed = ("karpenter.sh/capacity-type", "karpenter.sh/nodepool")
    if key not in allowed and domain.endswith("karpenter.sh"):
        refusals.append(KARPENTER_DOMAIN_RULE["message"])
    if not allow_nodepool and key == "karpenter.sh/nodepool":
        refusals.append(NODEPOOL_LABEL_RULE["message"])
    if key == "kubernetes.io/hostname":
        refusals.append(HOSTNAME_LABEL_RULE["message"])
    return refusals


def requirement_key_field(*rules: dict[str, str]) -> Any:
    """A requirement key's field: upstream's pattern and length, and the given CEL rules."""
    validations: list[Any] = list(rules)
    return Field(
        max_length=316,
        pattern=LABEL_KEY_PATTERN,
        json_schema_extra={"x-kubernetes-validations": validations},
    )


class NodeSelectorRequirementWithMinValues(KubeModel):
    """A node selector requirement, plus how many distinct values must stay possible.

    This is the NodeClaim's form; a NodePool's template refuses the ``karpenter.sh/nodepool``
    key as well (``NodePoolRequirement``).
    """

    ALLOWS_NODEPOOL_KEY: ClassVar[bool] = True

    key: Annotated[str, requirement_key_field(KARPENTER_DOMAIN_RULE, HOSTNAME_LABEL_RULE)]
    """The label key that the selector applies to."""
    operator: NodeSelectorOperator
    """How the key relates to the values."""
    # Upstream's CRD places maxLength/pattern beside the array, where the API server ignores
    # them: values are only checked at runtime (NodePool ValidationSucceeded), and so here.
    values: Annotated[
        list[str],
        Field(
            json_schema_extra={
                "x-kubernetes-list-type": "atomic",
                "maxLength": 63,
                "pattern": LABEL_VALUE_PATTERN,
            }
        ),
    ] = Field(default_factory=list)
    """Values for In/NotIn (non-empty for In), one integer for Gt/Lt/Gte/Lte, none otherwise."""
    min_values: Annotated[int | None, Field(ge=1, le=50)] = None
    """Minimum number of unique values this requirement must keep possible (flexibility)."""

    @model_validator(mode="after")
    def _check_key_and_values(self) -> NodeSelectorRequirementWithMinValues:
        refusals = restricted_key_refusals(self.key, allow_nodepool=self.ALLOWS_NODEPOOL_KEY)
        if refusals:
            raise ValueError(f"key {self.key!r}: " + "; ".join(refusals))
        problem = requirement_values_problem(self.operator, self.values, self.min_values)
        if problem:
            raise ValueError(f"requirement {self.key!r}: {problem}")
        return self


def requirement_values_problem(
    operator: NodeSelectorOperator, values: list[str], min_values: int | None
) -> str | None:
    """The message of the first list-level CEL rule (below) a requirement breaks, or None."""
    if operator is NodeSelectorOperator.IN and not values:
        return REQUIREMENTS_VALIDATIONS[0]["message"]
    if operator in _NUMERIC_OPERATORS and (
        len(values) != 1 or not _INTEGER.fullmatch(values[0]) or int(values[0]) < 0
    ):
        return REQUIREMENTS_VALIDATIONS[1]["message"]
    if operator is NodeSelectorOperator.IN and min_values is not None and len(values) < min_values:
        return REQUIREMENTS_VALIDATIONS[2]["message"]
    return None


REQUIREMENTS_VALIDATIONS: list[dict[str, str]] = [
    {
        "message": "requirements with operator 'In' must have a value defined",
        "rule": "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
    },
    {
        "message": "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single "
        "positive integer value",
        "rule": "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || "
        "x.operator == 'Gte' || x.operator == 'Lte') ? "
        "(x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
    },
    {
        "message": "requirements with 'minValues' must have at least that many values specified "
        "in the 'values' field",
        "rule": "self.all(x, (x.operator == 'In' && has(x.minValues)) ? "
        "x.values.size() >= x.minValues : true)",
    },
]
# The requirements list as upstream declares it: at most 100, replaced whole by merges.
REQUIREMENTS_LIST: dict[str, Any] = {
    "x-kubernetes-list-type": "atomic",
    "x-kubernetes-validations": REQUIREMENTS_VALIDATIONS,
}


def _not_empty(field: str) -> dict[str, Any]:
    return {
        "x-kubernetes-validations": [{"message": f"{field} may not be empty", "rule": "self != ''"}]
    }


class NodeClassReference(KubeModel):
    """Points at the provider-specific configuration (a ClusterAPINodeClass)."""

    kind: Annotated[str, Field(json_schema_extra=_not_empty("kind"))]
    """Kind of the referent."""
    name: Annotated[str, Field(json_schema_extra=_not_empty("name"))]
    """Name of the referent."""
    group: Annotated[str, Field(pattern=r"^[^/]*$", json_schema_extra=_not_empty("group"))]
    """API group of the referent."""

    @model_validator(mode="after")
    def _none_empty(self) -> NodeClassReference:
        empty = [f for f in ("group", "kind", "name") if not getattr(self, f)]
        if empty:
            raise ValueError("; ".join(f"{f} may not be empty" for f in empty))
        return self


class LabelSelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(KubeModel):
    key: str
    operator: LabelSelectorOperator
    values: Annotated[list[str], Field(json_schema_extra={"x-kubernetes-list-type": "atomic"})] = (
        Field(default_factory=list)
    )

    @model_validator(mode="after")
    def _check_values(self) -> LabelSelectorRequirement:
        needs_values = self.operator in {LabelSelectorOperator.IN, LabelSelectorOperator.NOT_IN}
        if needs_values and not self.values:
            raise ValueError(
                f"selector {self.key!r}: operator {self.operator.value!r} needs values"
            )
        if not needs_values and self.values:
            raise ValueError(
                f"selector {self.key!r}: operator {self.operator.value!r} takes no values"
            )
        return self


class LabelSelector(KubeModel):
    """A ``metav1.LabelSelector``. An empty selector matches everything, as in Kubernetes."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-map-type": "atomic"})

    match_labels: dict[str, str] = Field(default_factory=dict)
    """Equivalent to matchExpressions with operator In and a single value; ANDed."""
    match_expressions: Annotated[
        list[LabelSelectorRequirement],
        Field(json_schema_extra={"x-kubernetes-list-type": "atomic"}),
    ] = Field(default_factory=list)
    """Label selector requirements; ANDed."""

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes' semantics, by the one matcher core uses (:mod:`core.values.selectors`)."""
        return compile_parts(
            self.match_labels,
            ((e.key, e.operator.value, e.values) for e in self.match_expressions),
        ).matches(labels)


class TypedObject(KubeModel):
    """Common shape of a top-level API object: apiVersion, kind and metadata."""

    API_VERSION: ClassVar[str]
    KIND: ClassVar[str]

    api_version: str
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @model_validator(mode="before")
    @classmethod
    def _default_type_meta(cls, data: Any) -> Any:
        # Objects built in code need not repeat apiVersion/kind; objects read from the API
        # must carry the right ones.
        if isinstance(data, dict):
            data = dict(data)
            api_version = data.pop("api_version", None) or data.get("apiVersion", cls.API_VERSION)
            kind = data.get("kind", cls.KIND)
            if api_version != cls.API_VERSION or kind != cls.KIND:
                raise ValueError(
                    f"expected apiVersion {cls.API_VERSION!r} and kind {cls.KIND!r}, got "
                    f"{api_version!r} and {kind!r}"
                )
            data["apiVersion"] = api_version
            data["kind"] = kind
        return data

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    def to_json(self) -> dict[str, Any]:
        """The object as the API serves it (camelCase keys, no empty optional fields): a new
        dict at each call, the caller's to change, for a plugin that writes JSON."""
        result: dict[str, Any] = self.model_dump(by_alias=True, exclude_none=True, mode="json")
        return result
