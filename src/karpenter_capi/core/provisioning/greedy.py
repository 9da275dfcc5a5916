"""An interim packer: pending pods to new nodes, first-fit decreasing, price-aware.

This is the provisioning decision until the scheduling simulation lands (the scheduling issue
replaces it with a solver that knows affinity, topology spread, preferences and minValues).
It is deliberately simple but honest about what it checks: resource requests (with init
containers and overhead), nodeSelector, required node affinity, taints and tolerations, NodePool
requirements, and offering availability. Pods it cannot place are returned with the reason.

Choice of instance type: when a pod opens a node, every compatible instance type is scored by
its cheapest available offering's price divided by how many of the still-unplaced pods it would
hold; the lowest score wins. Packing many small pods onto one larger node then beats opening many
small nodes whenever that is cheaper per pod, and a lone pod still gets the cheapest node that
fits it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from karpenter_capi.core.api.wellknown import LABEL_CAPACITY_TYPE, LABEL_TOPOLOGY_ZONE
from karpenter_capi.core.instancetype import (
    InstanceType,
    Offering,
)
from karpenter_capi.core.provisioning.pending import pod_key
from karpenter_capi.core.scheduling.resources import ResourceList, empty, pod_requests
from karpenter_capi.core.scheduling.taints import Taint, untolerated

MAX_INSTANCE_TYPES_PER_CLAIM = 60


@dataclass(frozen=True, slots=True)
class PoolTemplate:
    """What every node of a NodePool has, whatever the instance type."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    requirements: tuple[Mapping[str, Any], ...]  # NodeSelectorRequirement dicts


@dataclass(slots=True)
class PlannedNode:
    """A node the packer decided to launch, with the pods it is meant for."""

    instance_type: InstanceType
    offering: Offering
    pods: list[Mapping[str, Any]] = field(default_factory=list)
    requests: ResourceList = field(default_factory=empty)
    alternatives: list[InstanceType] = field(default_factory=list)
    claim_name: str | None = None  # set for NodeClaims already launching
    nominated: frozenset[str] = frozenset()  # pod keys this in-flight NodeClaim was made for


@dataclass(frozen=True, slots=True)
class Unplaced:
    pod: Mapping[str, Any]
    reason: str


@dataclass(slots=True)
class PackResult:
    nodes: list[PlannedNode]
    unplaced: list[Unplaced]


def _matches_requirement(labels: Mapping[str, str], requirement: Mapping[str, Any]) -> bool:
    key = requirement.get("key", "")
    operator = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    present = key in labels
    value = labels.get(key, "")
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt", "Gte", "Lte"):
        try:
            have, want = int(value), int(values[0])
        except (ValueError, IndexError):
            return False
        return {"Gt": have > want, "Lt": have < want, "Gte": have >= want, "Lte": have <= want}[
            str(operator)
        ]
    return False


def _pod_accepts_labels(pod: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
    """``None`` when the pod's node selection accepts a node with these labels, else why not."""
    spec = pod.get("spec") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return f"nodeSelector {key}={value} not offered"
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    terms = (affinity or {}).get("nodeSelectorTerms") or []
    if terms and not any(
        all(_matches_requirement(labels, expr) for expr in term.get("matchExpressions") or [])
        for term in terms
    ):
        return "required node affinity not satisfied"
    return None


def node_labels(
    pool: PoolTemplate, instance_type: InstanceType, offering: Offering
) -> dict[str, str]:
    """The labels a node of this instance type and offering will carry (single-valued only)."""
    labels = dict(pool.labels)
    for key, values in instance_type.requirements.items():
        if len(values) == 1:
            labels[key] = next(iter(values))
    labels.update(offering.labels)
    labels[LABEL_TOPOLOGY_ZONE] = offering.zone
    labels[LABEL_CAPACITY_TYPE] = offering.capacity_type
    labels["karpenter.sh/nodepool"] = pool.name
    return labels


class GreedyPacker:
    """Packs pods onto new nodes of one NodePool's instance types."""

    def __init__(
        self,
        pool: PoolTemplate,
        instance_types: Sequence[InstanceType],
    ) -> None:
        self._pool = pool
        # (instance type, offering, labels) for every available offering the pool allows.
        self._choices: list[tuple[InstanceType, Offering, dict[str, str]]] = []
        for instance_type in instance_types:
            for offering in instance_type.offerings:
                if not offering.available:
                    continue
                labels = node_labels(pool, instance_type, offering)
                if all(_matches_requirement(labels, r) for r in pool.requirements):
                    self._choices.append((instance_type, offering, labels))
        self._choices.sort(key=lambda c: (c[1].price, c[0].name, c[1].zone))

    def _compatible(
        self, pod: Mapping[str, Any], choice: tuple[InstanceType, Offering, dict[str, str]]
    ) -> str | None:
        instance_type, _, labels = choice
        why = _pod_accepts_labels(pod, labels)
        if why:
            return why
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        taint = untolerated(tolerations, (*self._pool.taints, *instance_type.taints))
        return None if taint is None else f"taint {taint} not tolerated"

    def pack(
        self, pods: Sequence[Mapping[str, Any]], existing: Sequence[PlannedNode] = ()
    ) -> PackResult:
        """Place ``pods`` on ``existing`` nodes first (in-flight NodeClaims), then on new ones.

        Returned ``nodes`` include the existing ones that received pods.
        """
        requests = {id(p): pod_requests(p) for p in pods}
        queue = sorted(
            pods,
            key=lambda p: (-requests[id(p)].milli("cpu"), -requests[id(p)].milli("memory")),
        )
        nodes: list[PlannedNode] = list(existing)
        unplaced: list[Unplaced] = []
        nominated_to = {key: node for node in existing for key in node.nominated}
        placed_early = {
            id(pod)
            for pod in queue
            if (node := nominated_to.get(pod_key(pod))) and self._try_place(node, pod, requests)
        }
        queue = [pod for pod in queue if id(pod) not in placed_early]
        for index, pod in enumerate(queue):
            need = requests[id(pod)]
            if any(self._try_place(node, pod, requests) for node in nodes):
                continue
            best: tuple[float, float, int] | None = None
            best_choice: tuple[InstanceType, Offering, dict[str, str]] | None = None
            reasons: list[str] = []
            for ordinal, choice in enumerate(self._choices):
                why = self._compatible(pod, choice)
                if why is None and not need.fits(choice[0].allocatable):
                    why = f"requests exceed {choice[0].name} allocatable"
                if why is not None:
                    reasons.append(why)
                    continue
                held = self._would_hold(queue[index:], requests, choice)
                score = (choice[1].price / held, choice[1].price, ordinal)
                if best is None or score < best:
                    best, best_choice = score, choice
            if best_choice is None:
                reason = _summarise(reasons) if reasons else "no available offering in the NodePool"
                unplaced.append(Unplaced(pod, reason))
                continue
            nodes.append(PlannedNode(best_choice[0], best_choice[1], [pod], need))
        used = [node for node in nodes if node.pods]
        for node in used:
            if node.claim_name is None:
                node.alternatives = self._alternatives(node)
        return PackResult(used, unplaced)

    def _try_place(
        self, node: PlannedNode, pod: Mapping[str, Any], requests: Mapping[int, ResourceList]
    ) -> bool:
        """Put ``pod`` on ``node`` if the node accepts it and it still fits."""
        choice = (
            node.instance_type,
            node.offering,
            node_labels(self._pool, node.instance_type, node.offering),
        )
        total = node.requests.add(requests[id(pod)])
        if self._compatible(pod, choice) is not None or not total.fits(
            node.instance_type.allocatable
        ):
            return False
        node.pods.append(pod)
        node.requests = total
        return True

    def _would_hold(
        self,
        remaining: Sequence[Mapping[str, Any]],
        requests: Mapping[int, ResourceList],
        choice: tuple[InstanceType, Offering, dict[str, str]],
    ) -> int:
        total = empty()
        held = 0
        for pod in remaining:
            candidate = total.add(requests[id(pod)])
            if self._compatible(pod, choice) is None and candidate.fits(choice[0].allocatable):
                total = candidate
                held += 1
        return max(held, 1)

    def _alternatives(self, node: PlannedNode) -> list[InstanceType]:
        """Every instance type that could host this node's pods, cheapest first (capped)."""
        seen: dict[str, InstanceType] = {}
        for choice in self._choices:
            instance_type = choice[0]
            if instance_type.name in seen:
                continue
            if node.requests.fits(instance_type.allocatable) and all(
                self._compatible(pod, choice) is None for pod in node.pods
            ):
                seen[instance_type.name] = instance_type
        return list(seen.values())[:MAX_INSTANCE_TYPES_PER_CLAIM]


def _summarise(reasons: Sequence[str]) -> str:
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    return "; ".join(
        f"{reason} ({n} offering{'s' if n > 1 else ''})" for reason, n in counts.items()
    )
