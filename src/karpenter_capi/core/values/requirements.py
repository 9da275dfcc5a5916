"""The requirements algebra: what label values a node may have, and whether two sets meet.

Everything that constrains a node speaks this one language: a NodePool's ``requirements``, an
instance type's labels, an offering's zone and capacity type, a pod's ``nodeSelector`` and
required node affinity, and the domain a topology constraint narrows a pod to. The solver
intersects them and asks whether anything is left, exactly as Karpenter's
``scheduling.Requirements`` does, so a pod Karpenter would place we place, and vice versa.

A :class:`Requirement` is a set of allowed values for one label key, held either as the values
themselves (``In``, ``DoesNotExist``) or as their complement (``NotIn``, ``Exists``), with
optional integer bounds (``Gt``, ``Lt``, ``Gte``, ``Lte``). Keeping the complement form means
``NotIn`` and ``Exists`` never need the universe of values, and intersection stays closed.
Deprecated beta label keys are rewritten to their GA keys on the way in.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, Sequence, ValuesView
from dataclasses import dataclass
from typing import Any, Final, TypeVar, overload

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.values.refusal import Refusal

_T = TypeVar("_T")

OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")

NORMALIZED_LABELS: Final[Mapping[str, str]] = {
    wellknown.LABEL_ARCH_BETA: wellknown.LABEL_ARCH,
    wellknown.LABEL_OS_BETA: wellknown.LABEL_OS,
    wellknown.LABEL_INSTANCE_TYPE_BETA: wellknown.LABEL_INSTANCE_TYPE,
    wellknown.LABEL_ZONE_FAILURE_DOMAIN_BETA: wellknown.LABEL_TOPOLOGY_ZONE,
    wellknown.LABEL_REGION_FAILURE_DOMAIN_BETA: wellknown.LABEL_TOPOLOGY_REGION,
}
"""Deprecated label keys and the keys they mean; requirements on either are one requirement."""

WELL_KNOWN_LABELS: Final = frozenset(
    {
        wellknown.LABEL_TOPOLOGY_ZONE,
        wellknown.LABEL_TOPOLOGY_REGION,
        wellknown.LABEL_INSTANCE_TYPE,
        wellknown.LABEL_ARCH,
        wellknown.LABEL_OS,
        wellknown.LABEL_CAPACITY_TYPE,
        wellknown.LABEL_NODEPOOL,
        wellknown.LABEL_HOSTNAME,
        wellknown.LABEL_WINDOWS_BUILD,
    }
)
"""Labels every launched node gets whether or not a requirement names them.

A pod may require one of these even when the NodePool says nothing about it: the instance type
or the offering fills it in. Any other label a pod requires must be promised by the NodePool.
"""


class RequirementError(ValueError):
    """A requirement Kubernetes would reject: unknown operator, non-integer bound, ..."""


def normalize_key(key: str) -> str:
    """The GA key for a deprecated beta label key; any other key unchanged."""
    return NORMALIZED_LABELS.get(key, key)


def _int_bound(key: str, operator: str, values: Sequence[str]) -> int:
    if len(values) != 1:
        raise RequirementError(
            f"requirement {key} {operator}: needs exactly one value, got {list(values)}"
        )
    try:
        return int(values[0])
    except ValueError:
        raise RequirementError(
            f"requirement {key} {operator} {values[0]!r}: value must be an integer"
        ) from None


def _any_value(requirement: Requirement) -> str | None:
    """A value for a custom label that ``NotIn``, ``Exists``, ``Gt`` or ``Lt`` constrains.

    Nothing else gives such a label to the node, so without one the node would never meet its
    own NodePool's requirement and be replaced as drifted as soon as it launched, forever.
    Upstream's ``Requirements.Labels`` picks a random integer within the bounds; the first one
    allowed is as good and the same on every call (the NodeClaim's labels are computed more
    than once).
    """
    if not requirement.complement or wellknown.label_domain(requirement.key) in (
        wellknown.RESTRICTED_LABEL_DOMAINS
    ):
        return None
    gt, lt = requirement.greater_than, requirement.less_than
    low = gt + 1 if gt is not None else min(0, lt - 1) if lt is not None else 0
    high = lt if lt is not None else low + len(requirement.values) + 1
    for candidate in range(low, high):
        if str(candidate) not in requirement.values:
            return str(candidate)
    return None


def _as_int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Requirement:
    """The values one label may take on a node.

    ``complement`` False: the node's value must be one of ``values`` (empty: the label must be
    absent). ``complement`` True: any value except ``values`` (empty: any value at all, the
    label must exist). ``greater_than``/``less_than`` are exclusive integer bounds that every
    allowed value must also meet. ``min_values`` asks that at least that many distinct values
    stay possible (Karpenter's flexibility floor on instance types).
    """

    key: str
    complement: bool
    values: frozenset[str] = frozenset()
    greater_than: int | None = None
    less_than: int | None = None
    min_values: int | None = None

    @classmethod
    def new(
        cls,
        key: str,
        operator: str,
        values: Iterable[str] = (),
        *,
        min_values: int | None = None,
    ) -> Requirement:
        """A requirement from its Kubernetes form (``key``, ``operator``, ``values``)."""
        key = normalize_key(key)
        vals = [str(v) for v in values]
        match operator:
            case "In":
                return cls(key, False, frozenset(vals), min_values=min_values)
            case "NotIn":
                return cls(key, True, frozenset(vals), min_values=min_values)
            case "Exists":
                return cls(key, True, min_values=min_values)
            case "DoesNotExist":
                return cls(key, False, min_values=min_values)
            case "Gt":
                bound = _int_bound(key, operator, vals)
                return cls(key, True, greater_than=bound, min_values=min_values)
            case "Gte":
                bound = _int_bound(key, operator, vals) - 1
                return cls(key, True, greater_than=bound, min_values=min_values)
            case "Lt":
                bound = _int_bound(key, operator, vals)
                return cls(key, True, less_than=bound, min_values=min_values)
            case "Lte":
                bound = _int_bound(key, operator, vals) + 1
                return cls(key, True, less_than=bound, min_values=min_values)
        raise RequirementError(
            f"requirement {key}: operator {operator!r} is not one of {', '.join(OPERATORS)}"
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Requirement:
        """From ``{"key", "operator", "values", "minValues"}`` (a NodeSelectorRequirement)."""
        key = data.get("key")
        if not key:
            raise RequirementError(f"requirement {dict(data)!r}: needs a key")
        min_values = data.get("minValues")
        return cls.new(
            str(key),
            str(data.get("operator") or ""),
            data.get("values") or (),
            min_values=None if min_values is None else int(min_values),
        )

    def _in_bounds(self, value: str) -> bool:
        if self.greater_than is None and self.less_than is None:
            return True
        number = _as_int(value)
        if number is None:
            return False
        if self.greater_than is not None and number <= self.greater_than:
            return False
        return self.less_than is None or number < self.less_than

    def has(self, value: str) -> bool:
        """Whether a node labelled ``key=value`` satisfies this requirement."""
        # The topology asks this for every domain of every candidate node; bounds are rare,
        # so their check (a call) is made only when there are some.
        listed = value in self.values
        if listed == self.complement:  # listed and excluded, or unlisted and required
            return False
        return (self.greater_than is None and self.less_than is None) or self._in_bounds(value)

    def _bounds_empty(self) -> bool:
        return (
            self.greater_than is not None
            and self.less_than is not None
            and self.greater_than + 1 >= self.less_than
        )

    def is_empty(self) -> bool:
        """No value satisfies it (``DoesNotExist`` is empty: it allows only absence)."""
        if self.complement:
            return self.count() == 0
        return not self.values

    def allows_absence(self) -> bool:
        """Whether a node without this label satisfies it (``NotIn`` and ``DoesNotExist``)."""
        if self.greater_than is not None or self.less_than is not None:
            return False
        return self.complement if self.values else not self.complement

    def count(self) -> int:
        """How many values it allows; a complement allows unboundedly many (a large number)."""
        if self.complement:
            if self._bounds_empty():
                return 0
            if self.greater_than is not None and self.less_than is not None:
                span = self.less_than - self.greater_than - 1
                return max(0, span - sum(1 for v in self.values if self._in_bounds(v)))
            return _UNBOUNDED
        return len(self.values)

    def intersection(self, other: Requirement) -> Requirement:
        """Values allowed by both; ``min_values`` is the larger of the two."""
        greater = _max_optional(self.greater_than, other.greater_than)
        less = _min_optional(self.less_than, other.less_than)
        min_values = _max_optional(self.min_values, other.min_values)
        if self.complement and other.complement:
            values = self.values | other.values
            return Requirement(self.key, True, values, greater, less, min_values)
        if self.complement:
            values = frozenset(v for v in other.values if self.has(v))
        elif other.complement:
            values = frozenset(v for v in self.values if other.has(v))
        else:
            values = self.values & other.values
        if greater is not None or less is not None:
            bounded = Requirement(self.key, False, values, greater, less)
            values = frozenset(v for v in values if bounded._in_bounds(v))
        # The bounds are spent on the explicit values; keeping them would only make equal
        # value sets compare unequal.
        return Requirement(self.key, False, values, min_values=min_values)

    def intersects(self, other: Requirement) -> bool:
        """Whether some node could satisfy both.

        Two requirements that each allow absence (``NotIn``/``DoesNotExist``) always meet: a
        node without the label satisfies both.
        """
        if not self.intersection(other).is_empty():
            return True
        return self.allows_absence() and other.allows_absence()

    @property
    def operator(self) -> str:
        """The Kubernetes operator that best describes it (bounds report as ``Gt``/``Lt``)."""
        if self.complement:
            if self.greater_than is not None:
                return "Gt"
            if self.less_than is not None:
                return "Lt"
            return "NotIn" if self.values else "Exists"
        return "In" if self.values else "DoesNotExist"

    def any_value(self) -> str | None:
        """One allowed value (the smallest, for determinism), ``None`` for a complement."""
        if self.complement:
            if self.greater_than is not None:
                candidate = self.greater_than + 1
                while str(candidate) in self.values:
                    candidate += 1
                return str(candidate) if self._in_bounds(str(candidate)) else None
            return None
        return min(self.values) if self.values else None

    def to_dicts(self) -> list[dict[str, Any]]:
        """The NodeSelectorRequirements that express it (bounds become separate Gt/Lt terms)."""
        result: list[dict[str, Any]] = []
        extra: dict[str, Any] = {} if self.min_values is None else {"minValues": self.min_values}
        if not self.complement:
            if self.values:
                result.append(
                    {"key": self.key, "operator": "In", "values": sorted(self.values), **extra}
                )
            else:
                result.append({"key": self.key, "operator": "DoesNotExist"})
            return result
        if self.values:
            result.append(
                {"key": self.key, "operator": "NotIn", "values": sorted(self.values), **extra}
            )
        if self.greater_than is not None:
            result.append({"key": self.key, "operator": "Gt", "values": [str(self.greater_than)]})
        if self.less_than is not None:
            result.append({"key": self.key, "operator": "Lt", "values": [str(self.less_than)]})
        if not result:
            result.append({"key": self.key, "operator": "Exists", **extra})
        return result

    def __str__(self) -> str:
        return ", ".join(_format(d) for d in self.to_dicts())


_UNBOUNDED: Final = 1 << 31


def _format(data: Mapping[str, Any]) -> str:
    values = data.get("values")
    if not values:
        return f"{data['key']} {data['operator']}"
    return f"{data['key']} {data['operator']} [{', '.join(values)}]"


def _max_optional(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _min_optional(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


class Requirements(Mapping[str, Requirement]):
    """Requirements on several label keys; a node must satisfy all of them.

    Immutable: every combining operation returns a new value, so one instance type's or one
    NodePool's requirements can be shared by every NodeClaim the solver considers.
    """

    __slots__ = ("_by_key", "_hash")

    def __init__(self, requirements: Iterable[Requirement] = ()) -> None:
        by_key: dict[str, Requirement] = {}
        for requirement in requirements:
            existing = by_key.get(requirement.key)
            by_key[requirement.key] = (
                requirement if existing is None else existing.intersection(requirement)
            )
        self._by_key = by_key
        self._hash: int | None = None

    @classmethod
    def from_dicts(cls, terms: Iterable[Mapping[str, Any]]) -> Requirements:
        """From NodeSelectorRequirements (a NodePool's ``requirements``, one affinity term)."""
        return cls(Requirement.from_dict(term) for term in terms)

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> Requirements:
        """``key In [value]`` for each label (a nodeSelector, a node's labels)."""
        return cls(Requirement.new(key, "In", (value,)) for key, value in labels.items())

    @classmethod
    def from_value_sets(cls, values: Mapping[str, Iterable[str]]) -> Requirements:
        """``key In values`` for each key (an instance type's minimal requirements)."""
        return cls(Requirement.new(key, "In", vals) for key, vals in values.items())

    def __getitem__(self, key: str) -> Requirement:
        return self._by_key[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    # The Mapping mixins go through __getitem__ and a Python-level view; these answer from the
    # dict directly, which the solver asks a few times for every pod and claim it tries.
    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    @overload
    def get(self, key: str, /) -> Requirement | None: ...
    @overload
    def get(self, key: str, /, default: Requirement | _T) -> Requirement | _T: ...
    def get(self, key: str, /, default: object = None) -> object:
        return self._by_key.get(key, default)

    def keys(self) -> KeysView[str]:
        return self._by_key.keys()

    def values(self) -> ValuesView[Requirement]:
        return self._by_key.values()

    def items(self) -> ItemsView[str, Requirement]:
        return self._by_key.items()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Requirements):
            return self._by_key == other._by_key
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._by_key.values()))
        return self._hash

    def __repr__(self) -> str:
        return f"Requirements({'; '.join(str(r) for r in self._by_key.values())})"

    def __str__(self) -> str:
        return "; ".join(str(r) for r in self._by_key.values()) or "(none)"

    def merged(self, other: Requirements | Iterable[Requirement]) -> Requirements:
        """Both sets at once: shared keys intersect."""
        extra = other._by_key.values() if isinstance(other, Requirements) else other
        return Requirements([*self._by_key.values(), *extra])

    def with_requirement(self, requirement: Requirement) -> Requirements:
        return self.merged((requirement,))

    def label_value(self, key: str) -> str | None:
        """The value a node must have for ``key`` when exactly one is allowed."""
        requirement = self._by_key.get(key)
        if requirement is None or requirement.complement or len(requirement.values) != 1:
            return None
        return next(iter(requirement.values))

    def labels(self) -> dict[str, str]:
        """The labels a new node will carry: those pinned to one value, and a value for every
        custom label the requirements let take many (see ``_any_value``)."""
        result = {}
        for key, requirement in self._by_key.items():
            value = self.label_value(key)
            if value is None and key not in WELL_KNOWN_LABELS:
                value = _any_value(requirement)
            if value is not None and requirement.has(value):
                result[key] = value
        return result

    def conflict_with(self, other: Mapping[str, Requirement]) -> Refusal | None:
        """Why no node satisfies both (a shared key with no common value), or ``None``."""
        small, large = (self, other) if len(self) <= len(other) else (other, self)
        for key, requirement in small.items():
            counterpart = large.get(key)
            if counterpart is not None and not requirement.intersects(counterpart):
                return Refusal(f"{requirement} conflicts with {counterpart}")
        return None

    def incompatibility(
        self, incoming: Mapping[str, Requirement], *, undefined: frozenset[str] = WELL_KNOWN_LABELS
    ) -> Refusal | None:
        """Why a node with these requirements cannot meet ``incoming``, or ``None`` if it can.

        ``incoming`` is what a pod asks for. A key it requires that these requirements never
        mention is allowed only if absence satisfies it (``NotIn``, ``DoesNotExist``) or the
        key is one the provider fills in on every node (``undefined``, the well-known labels by
        default); a custom label the NodePool never promised cannot appear on a new node.
        """
        for key, requirement in incoming.items():
            if key in self._by_key or key in undefined or requirement.allows_absence():
                continue
            return Refusal(f"label {key} is not defined by the NodePool ({requirement})")
        return self.conflict_with(incoming)

    def min_values_problem(
        self, instance_type_values: Mapping[str, Iterable[str]]
    ) -> Refusal | None:
        """Which ``minValues`` floor the remaining instance types no longer meet, or ``None``.

        ``instance_type_values`` maps each label key to the distinct values the remaining
        instance types offer for it (instance type names for ``node.kubernetes.io/instance-type``).
        """
        for key, requirement in self._by_key.items():
            if requirement.min_values is None:
                continue
            available = {v for v in instance_type_values.get(key, ()) if requirement.has(v)}
            if len(available) < requirement.min_values:
                return Refusal(
                    f"minValues {requirement.min_values} for {key} not met: only "
                    f"{len(available)} value(s) remain ({', '.join(sorted(available)) or 'none'})"
                )
        return None

    def satisfied_by(self, labels: Mapping[str, str]) -> bool:
        """Whether a node carrying exactly ``labels`` meets every requirement."""
        for key, requirement in self._by_key.items():
            value = labels.get(key)
            if value is None:
                if not requirement.allows_absence():
                    return False
            elif not requirement.has(value):
                return False
        return True

    def to_dicts(self) -> list[dict[str, Any]]:
        """As NodeSelectorRequirements, sorted by key (what a NodeClaim's spec holds)."""
        return [d for key in sorted(self._by_key) for d in self._by_key[key].to_dicts()]


EMPTY: Final = Requirements()


def node_selector_terms(pod: Mapping[str, Any]) -> list[Requirements]:
    """A pod's node constraints as alternatives: ``nodeSelector`` AND one of the OR-terms.

    The terms of ``requiredDuringSchedulingIgnoredDuringExecution`` are ORed; each term's
    ``matchExpressions`` are ANDed. ``matchFields`` (only ``metadata.name``) pins a node by
    name, which a node not yet launched can never satisfy, so such a term is dropped. A pod
    with none of these has one alternative: no requirement. Returns an empty list when every
    term was dropped: the pod cannot go on a new node.
    """
    spec = pod.get("spec") or {}
    selector = Requirements.from_labels(spec.get("nodeSelector") or {})
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = affinity.get("nodeSelectorTerms") or []
    if not terms:
        return [selector]
    alternatives = []
    for term in terms:
        # A term selecting by field pins an existing node; an empty term selects no node.
        if term.get("matchFields") or not term.get("matchExpressions"):
            continue
        alternatives.append(
            selector.merged(Requirements.from_dicts(term.get("matchExpressions") or []))
        )
    return alternatives


def preferred_node_terms(pod: Mapping[str, Any]) -> list[tuple[int, Requirements]]:
    """``preferredDuringScheduling`` node affinity as (weight, requirements), heaviest first."""
    spec = pod.get("spec") or {}
    preferred = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    ) or []
    result = [
        (
            int(term.get("weight") or 0),
            Requirements.from_dicts((term.get("preference") or {}).get("matchExpressions") or []),
        )
        for term in preferred
    ]
    result.sort(key=lambda item: -item[0])
    return result
