"""The node-level predicates of the simulated kube-scheduler, written from the Kubernetes docs.

The autoprovisioner's own scheduling simulation (``karpenter_capi.core.scheduling``) decides
which nodes to create for pending pods; this module decides, like kube-scheduler would, where
those pods then land. It deliberately shares no code with it, not even quantity parsing: were
both built on one helper, a bug in it would make the two agree and every scenario pass while
both are wrong. Disagreement must show up as a pod left pending in a scenario.

Everything here is a pure function of plain JSON objects, so the controller can evaluate
thousands of pods per tick against a precomputed snapshot.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from functools import lru_cache
from typing import Any, Final

JsonObject = dict[str, Any]

CPU: Final = "cpu"
MEMORY: Final = "memory"
PODS: Final = "pods"

_QUANTITY = re.compile(
    r"^([+-]?)(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)
_SUFFIXES: Final[dict[str, Fraction]] = {
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_NANO: Final = 10**9
NONZERO_CPU: Final = 100 * 10**6  # 100m: what scoring counts for a container without a request
NONZERO_MEMORY: Final = 200 * 2**20 * _NANO  # 200Mi


def nanos(value: object) -> int:
    """A quantity as an exact integer count of nano-units, rounded up as Kubernetes does."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return value * _NANO
    if isinstance(value, float):
        return math.ceil(Fraction(value) * _NANO)
    return _parse(str(value))


@lru_cache(maxsize=4096)
def _parse(value: str) -> int:
    """Parse a quantity string; cached, as every pod of a Deployment repeats the same few."""
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    sign, number, suffix = match.group(1), match.group(2), match.group(3) or ""
    if suffix[:1] in ("e", "E"):
        exponent = int(suffix[1:])
        if abs(exponent) > 100:
            raise ValueError(f"quantity out of range: {value!r}")
        scale = Fraction(10) ** exponent
    else:
        scale = _SUFFIXES[suffix]
    amount = Fraction(number) * scale * _NANO
    return -math.ceil(amount) if sign == "-" else math.ceil(amount)


def resource_list(values: Mapping[str, Any] | None) -> dict[str, int]:
    return {name: nanos(quantity) for name, quantity in (values or {}).items()}


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, 0) + amount


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """Effective requests: max(sum of containers, each init container) plus overhead.

    ``pods`` is always one: every pod takes a slot of the node's ``pods`` allocatable.
    """
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        _add(total, resource_list((container.get("resources") or {}).get("requests")))
    for container in spec.get("initContainers") or []:
        for name, amount in resource_list(
            (container.get("resources") or {}).get("requests")
        ).items():
            total[name] = max(total.get(name, 0), amount)
    _add(total, resource_list(spec.get("overhead")))
    total[PODS] = _NANO
    return total


def pod_nonzero_cpu_memory(pod: Mapping[str, Any]) -> tuple[int, int]:
    """CPU and memory as kube-scheduler's LeastAllocated scoring counts them, in nano-units.

    Each container (and init container) without a CPU or memory request counts as asking for
    100m CPU and 200Mi memory, so a node full of request-less pods does not score as empty.
    The defaults apply per container, not per pod, as in ``PodRequests`` with
    ``NonMissingContainerRequests``.
    """
    spec = pod.get("spec") or {}

    def nonzero(container: Mapping[str, Any]) -> tuple[int, int]:
        requests = resource_list((container.get("resources") or {}).get("requests"))
        return requests.get(CPU, NONZERO_CPU), requests.get(MEMORY, NONZERO_MEMORY)

    cpu = memory = 0
    for container in spec.get("containers") or []:
        more_cpu, more_memory = nonzero(container)
        cpu += more_cpu
        memory += more_memory
    for container in spec.get("initContainers") or []:
        init_cpu, init_memory = nonzero(container)
        cpu, memory = max(cpu, init_cpu), max(memory, init_memory)
    overhead = resource_list(spec.get("overhead"))
    return cpu + overhead.get(CPU, 0), memory + overhead.get(MEMORY, 0)


def node_allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    status = node.get("status") or {}
    return resource_list(status.get("allocatable") or status.get("capacity"))


# Label selectors (metav1.LabelSelector) and node selector terms (v1.NodeSelectorTerm).


def _requirement(values: Mapping[str, str], key: str, operator: str, wanted: list[str]) -> bool:
    present = key in values
    if operator == "In":
        return present and values[key] in wanted
    if operator == "NotIn":
        return not present or values[key] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(wanted) != 1:
            return False
        try:
            have, bound = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """``metav1.LabelSelector``; ``None`` matches nothing, ``{}`` matches everything."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(
        _requirement(labels, e["key"], e["operator"], list(e.get("values") or []))
        for e in selector.get("matchExpressions") or []
    )


def node_selector_term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """A ``NodeSelectorTerm``: all its expressions and fields hold; an empty one matches none."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels = (node.get("metadata") or {}).get("labels") or {}
    field_values = {"metadata.name": (node.get("metadata") or {}).get("name", "")}
    return all(
        _requirement(labels, e["key"], e["operator"], list(e.get("values") or []))
        for e in expressions
    ) and all(
        _requirement(field_values, f["key"], f["operator"], list(f.get("values") or []))
        for f in fields
    )


def node_affinity_matches(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """``spec.nodeSelector`` and required node affinity (terms ORed)."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    ) or None
    if required is None:
        return True
    return any(node_selector_term_matches(t, node) for t in required.get("nodeSelectorTerms") or [])


def preferred_node_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> int:
    """The summed weights of the pod's preferred node affinity terms ``node`` matches."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    return sum(
        int(term.get("weight") or 0)
        for term in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        if node_selector_term_matches(term.get("preference") or {}, node)
    )


# Taints and tolerations.


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def prefer_no_schedule_taints(pod: Mapping[str, Any], node: Mapping[str, Any]) -> int:
    """How many of ``node``'s ``PreferNoSchedule`` taints ``pod`` does not tolerate."""
    tolerations = [
        t
        for t in (pod.get("spec") or {}).get("tolerations") or []
        if (t.get("effect") or "PreferNoSchedule") == "PreferNoSchedule"
    ]
    return sum(
        1
        for taint in (node.get("spec") or {}).get("taints") or []
        if taint.get("effect") == "PreferNoSchedule"
        and not any(_tolerates(t, taint) for t in tolerations)
    )


def untolerated_taint(pod: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first NoSchedule/NoExecute taint of ``node`` that ``pod`` does not tolerate."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            found: Mapping[str, Any] = taint
            return found
    return None


def node_ready(node: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def pod_terms(pod: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    """Required ``podAffinity`` or ``podAntiAffinity`` terms of ``pod``."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    return list(affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def preferred_pod_terms(pod: Mapping[str, Any], kind: str) -> list[tuple[int, Mapping[str, Any]]]:
    """Preferred ``podAffinity`` or ``podAntiAffinity`` terms of ``pod`` as (weight, term)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    return [
        (int(weighted.get("weight") or 0), weighted.get("podAffinityTerm") or {})
        for weighted in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        if weighted.get("weight")
    ]


def term_namespaces(term: Mapping[str, Any], own_namespace: str) -> frozenset[str] | None:
    """The namespaces a pod (anti-)affinity term looks at; ``None`` means all of them.

    ``namespaceSelector: {}`` selects every namespace; a non-empty namespace selector would need
    Namespace labels, which the stand-in does not read: it is treated as the term's own list.
    """
    names = frozenset(term.get("namespaces") or [])
    selector = term.get("namespaceSelector")
    if (
        selector is not None
        and not selector.get("matchLabels")
        and not selector.get("matchExpressions")
    ):
        return None
    return names or frozenset({own_namespace})


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}
