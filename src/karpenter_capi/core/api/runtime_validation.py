"""What a NodePool must also satisfy before it is used, beyond what the API server admits.

Upstream Karpenter splits validation in two. The CRD (OpenAPI schema and CEL rules) decides
admission; the pydantic models mirror that exactly. ``RuntimeValidate`` then runs in the NodePool
readiness controller and, when it fails, sets ``ValidationSucceeded=False`` so the pool is not
used and the user sees why, without the object being refused: label keys that are not qualified
names (``spaces are not allowed``, name parts over 63 characters), taint keys and values that are
not qualified names, a taint key/effect pair given twice across ``taints`` and ``startupTaints``,
requirements on restricted labels or with invalid values, and a capacity-type requirement that
names no capacity type Karpenter knows. This module is that second step, as ``runtime_problems``.

Two more checks are this project's, for NodePools upstream admits but cannot use either (its
NodeClaim creates fail on every round): a name longer than a label value may be (it becomes the
``karpenter.sh/nodepool`` label of every NodeClaim and Node), and so many requirements and
labels that its NodeClaims would carry more requirements than the NodeClaim CRD admits.
"""

from __future__ import annotations

import re
from typing import Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.meta import (
    NodeSelectorOperator,
    NodeSelectorRequirementWithMinValues,
    Taint,
    requirement_values_problem,
)
from karpenter_capi.core.api.nodeclaim import NODECLAIM_MAX_REQUIREMENTS
from karpenter_capi.core.api.nodepool import NodePool

_NAME_PART: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
_LABEL_VALUE: Final = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def qualified_name_problems(name: str) -> list[str]:
    """Why ``name`` is not a Kubernetes qualified name (``IsQualifiedName``), kube's wording."""
    prefix, slash, part = name.rpartition("/")
    if name.count("/") > 1:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character, with an optional DNS subdomain "
            "prefix and '/' (e.g. 'example.com/MyName')"
        ]
    problems = []
    if slash:
        if not prefix:
            problems.append("prefix part must be non-empty")
        elif len(prefix) > 253:
            problems.append("prefix part must be no more than 253 characters")
        elif not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            problems.append(
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character"
            )
    if not part:
        problems.append("name part must be non-empty")
    elif len(part) > 63:
        problems.append("name part must be no more than 63 characters")
    elif not _NAME_PART.fullmatch(part):
        problems.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character"
        )
    return problems


def label_value_problems(value: str) -> list[str]:
    """Why ``value`` is not a valid label value (``IsValidLabelValue``), kube's wording."""
    if len(value) > 63:
        return ["must be no more than 63 characters"]
    if not _LABEL_VALUE.fullmatch(value):
        return [
            "a valid label must be an empty string or consist of alphanumeric characters, '-', "
            "'_' or '.', and must start and end with an alphanumeric character"
        ]
    return []


def _label_problems(labels: dict[str, str]) -> list[str]:
    problems = []
    for key, value in labels.items():
        where = f"spec.template.metadata.labels[{key}]"
        if key == wellknown.LABEL_NODEPOOL:
            problems.append(f"{where}: invalid key name {key!r} in labels, restricted")
        problems += [
            f"{where}: invalid key name {key!r}, {p}" for p in qualified_name_problems(key)
        ]
        problems += [f"{where}: invalid value {value!r}, {p}" for p in label_value_problems(value)]
        reason = wellknown.restricted_label_reason(key)
        if reason:
            problems.append(f"{where}: {reason}")
    return problems


def _taint_problems(taints: list[Taint], startup_taints: list[Taint]) -> list[str]:
    problems = []
    seen: set[tuple[str, str]] = set()
    for field, group in (("taints", taints), ("startupTaints", startup_taints)):
        for index, taint in enumerate(group):
            where = f"spec.template.spec.{field}[{index}]"
            problems += [f"{where}.key: {p}" for p in qualified_name_problems(taint.key)]
            if taint.value:
                problems += [f"{where}.value: {p}" for p in qualified_name_problems(taint.value)]
            identity = (taint.key, taint.effect.value)
            if identity in seen:
                problems.append(
                    f"{where}: duplicate taint Key/Effect pair {taint.key}={taint.effect.value}"
                )
            seen.add(identity)
    return problems


def requirement_problems(requirement: NodeSelectorRequirementWithMinValues) -> list[str]:
    """Upstream's ``ValidateRequirement`` for one requirement (deprecated aliases normalised)."""
    key = wellknown.NORMALIZED_LABELS.get(requirement.key, requirement.key)
    problems = []
    reason = wellknown.restricted_label_reason(key)
    if reason:
        problems.append(reason)
    problems += _well_known_value_problems(key, requirement)
    problems += [f"key {key} is not a qualified name, {p}" for p in qualified_name_problems(key)]
    for value in requirement.values:
        problems += [
            f"invalid value {value} for key {key}, {p}" for p in label_value_problems(value)
        ]
    values_problem = requirement_values_problem(
        requirement.operator, requirement.values, requirement.min_values
    )
    if values_problem:
        problems.append(f"key {key}: {values_problem}")
    return problems


def _well_known_value_problems(
    key: str, requirement: NodeSelectorRequirementWithMinValues
) -> list[str]:
    known = wellknown.WELL_KNOWN_VALUES.get(key)
    if known is None or requirement.operator is not NodeSelectorOperator.IN:
        return []
    valid = [v for v in requirement.values if v in known]
    if not valid:
        return [
            f"no valid values found in {requirement.values} for {key}, expected one of: "
            f"{sorted(known)}"
        ]
    if requirement.min_values is not None and len(valid) < requirement.min_values:
        return [
            f"not enough valid values found in {requirement.values} for {key}, expected at "
            f"least {requirement.min_values} valid values from: {sorted(known)}"
        ]
    return []


def _name_problems(name: str) -> list[str]:
    return [
        f"metadata.name: invalid value {name[:20]!r}... for the {wellknown.LABEL_NODEPOOL} label "
        f"its NodeClaims and Nodes carry, {p}; use a shorter name"
        for p in label_value_problems(name)
    ]


def _nodeclaim_requirement_count(nodepool: NodePool) -> int:
    """How many requirements the NodeClaims of ``nodepool`` carry at least: one per key of its
    requirements and template labels (two or three for a key bounded by NotIn, Gt and Lt, which
    are written apart), plus the NodePool, instance-type and capacity-type keys."""
    template = nodepool.spec.template
    operators: dict[str, set[str]] = {}
    for requirement in template.spec.requirements:
        key = wellknown.NORMALIZED_LABELS.get(requirement.key, requirement.key)
        operators.setdefault(key, set()).add(requirement.operator.value)
    for key in [*template.metadata.labels, wellknown.LABEL_NODEPOOL]:
        operators.setdefault(key, set()).add("In")
    for key in (wellknown.LABEL_INSTANCE_TYPE, wellknown.LABEL_CAPACITY_TYPE):
        operators.setdefault(key, {"In"})
    count = 0
    for used in operators.values():
        if used & {"In", "DoesNotExist"}:
            count += 1
        else:
            count += max(1, len(used & {"NotIn", "Gt", "Lt"}))
    return count


def _requirement_count_problems(nodepool: NodePool) -> list[str]:
    count = _nodeclaim_requirement_count(nodepool)
    if count <= NODECLAIM_MAX_REQUIREMENTS:
        return []
    mine = len(nodepool.spec.template.spec.requirements)
    return [
        f"spec.template.spec.requirements: its NodeClaims would carry {count} requirements (its "
        f"{mine}, one per template label, and {wellknown.LABEL_NODEPOOL}, "
        f"{wellknown.LABEL_INSTANCE_TYPE} and {wellknown.LABEL_CAPACITY_TYPE}) and a NodeClaim "
        f"admits at most {NODECLAIM_MAX_REQUIREMENTS}; keep at most "
        f"{max(0, mine - (count - NODECLAIM_MAX_REQUIREMENTS))} requirements here"
    ]


def runtime_problems(nodepool: NodePool) -> list[str]:
    """Everything upstream's ``NodePool.RuntimeValidate`` refuses, one line each with a path,
    and the two NodePools this project refuses besides (see the module docstring)."""
    template = nodepool.spec.template
    problems = _name_problems(nodepool.metadata.name or "")
    problems += _requirement_count_problems(nodepool)
    problems += _label_problems(template.metadata.labels)
    problems += _taint_problems(template.spec.taints, template.spec.startup_taints)
    for index, requirement in enumerate(template.spec.requirements):
        where = f"spec.template.spec.requirements[{index}]"
        problems += [f"{where}: {p}" for p in requirement_problems(requirement)]
        if requirement.key == wellknown.LABEL_NODEPOOL:
            problems.append(f"{where}: invalid key {requirement.key!r} in requirements, restricted")
    return problems
