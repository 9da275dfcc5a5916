"""What a disruption pass reads of each pod, Node and NodeClaim, read once per version.

A pass over 10,000 nodes and 70,000 pods read every object's JSON again each time (is the pod
active, may it move, what does it cost to move, does it forbid disruption; is the NodeClaim
initialized, drifted, when does it expire; what does its Node cost), though almost nothing
changes between two passes 10 s apart. Here each version of an object (``uid`` and
``resourceVersion``) is read once into a small frozen value kept across passes
(``passfacts.PassFacts``, held by the ``ParsedCluster`` the controller keeps, as parsed pods
are), and a pass only evaluates what depends on the time (a do-not-disrupt duration, a
NodeClaim's share of life left) over those values. An object without both (a hand-made one)
is read afresh.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.duration import DurationError, parse_duration
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.provisioning.state import (
    FINISHED_PHASES,
    MIRROR_POD_ANNOTATION,
    UNMOVED_OWNER_KINDS,
    has_disrupted_taint,
    is_interrupted,
    is_reschedulable,
)
from karpenter_capi.core.scheduling.assembly import open_twin
from karpenter_capi.core.scheduling.podspec import PodObject, PodSpec, pod_key

DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"

T = TypeVar("T")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def condition_true(obj: Mapping[str, Any], condition_type: str) -> bool:
    """Whether ``obj`` has ``condition_type`` with status True."""
    return any(
        c.get("type") == condition_type and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def _is_active(pod: PodObject) -> bool:
    """Neither finished nor terminating (upstream's ``IsActive``)."""
    if _meta(pod).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in FINISHED_PHASES


def _is_active_phase(pod: PodObject) -> bool:
    """Not finished: a pod the pass parses (bound, or pending)."""
    return (pod.get("status") or {}).get("phase") not in FINISHED_PHASES


def _pod_started(pod: PodObject) -> datetime | None:
    raw = (pod.get("status") or {}).get("startTime") or _meta(pod).get("creationTimestamp")
    return parse_timestamp(str(raw)) if raw else None


def do_not_disrupt_until(pod: PodObject) -> datetime | bool | None:
    """``True`` when the pod forbids disruption outright, a time when it forbids it until
    then (a duration from its start), ``None`` when it does not forbid it."""
    value = (_meta(pod).get("annotations") or {}).get(wellknown.ANNOTATION_DO_NOT_DISRUPT)
    if value is None:
        return None
    if value == "true":
        return True
    try:
        duration = parse_duration(value)
    except DurationError:
        return None  # anything else is not "true": upstream ignores it
    started = _pod_started(pod)
    return None if started is None else started + duration


def rescheduling_cost(pod: PodObject) -> float:
    """Upstream's per-pod cost (``EvictionCost``): 1, plus the deletion cost over 2^27 and the
    priority over 2^25, within [-10, 10]: one pod never weighs more than ten default ones."""
    cost = 1.0
    raw = (_meta(pod).get("annotations") or {}).get(DELETION_COST_ANNOTATION)
    if raw is not None:
        with contextlib.suppress(ValueError):
            cost += float(raw) / 2.0**27
    priority = (pod.get("spec") or {}).get("priority")
    if isinstance(priority, int):
        cost += priority / 2.0**25
    return min(max(cost, -10.0), 10.0)


@dataclass(frozen=True, slots=True)
class PodFacts:
    """One version of a pod as disruption reads it."""

    key: str
    node_name: str
    active: bool
    """Neither finished nor terminating: only an active pod's do-not-disrupt protects."""
    reschedulable: bool
    """Must find another node if its node goes (``state.is_reschedulable``)."""
    cost: float
    """``rescheduling_cost``."""
    do_not_disrupt: datetime | bool | None
    """``do_not_disrupt_until``."""
    namespace: str
    labels: tuple[tuple[str, str], ...]
    """Sorted: what a PodDisruptionBudget's selector is matched against, once per label set."""
    finished: bool = False
    """Phase ``Succeeded`` or ``Failed``: a pod no node's requests count
    (``state.existing_nodes``)."""

    @classmethod
    def read(cls, pod: PodObject) -> PodFacts:
        meta = _meta(pod)
        spec = pod.get("spec") or {}
        # Most pods have no annotation and no priority: their cost is 1 and nothing forbids
        # disrupting them, without asking.
        plain = not meta.get("annotations") and "priority" not in spec
        return cls(
            key=pod_key(pod),
            node_name=str(spec.get("nodeName") or ""),
            active=_is_active(pod),
            reschedulable=is_reschedulable(pod),
            cost=1.0 if plain else rescheduling_cost(pod),
            do_not_disrupt=None if plain else do_not_disrupt_until(pod),
            namespace=str(meta.get("namespace", "")),
            labels=tuple(sorted((meta.get("labels") or {}).items())),
            finished=not _is_active_phase(pod),
        )

    @classmethod
    def of(cls, spec: PodSpec, labels: tuple[tuple[str, str], ...] | None = None) -> PodFacts:
        """``read(spec.raw)``, taken from the pod's parse where it holds the same: its key,
        node, phase, deletion and owners (``podspec.parse_pod`` reads them once, for
        provisioning as for disruption); only its namespace, annotations and priority are read
        here. ``labels``: its labels sorted, when known already (the pods of one class share
        them). A spec that could not be parsed (``problem``) holds no owners: read in full."""
        pod = spec.raw
        if spec.problem is not None:
            return cls.read(pod)
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations")
        finished = spec.phase in FINISHED_PHASES
        active = not spec.deleting and not finished
        # ``state.is_reschedulable``.
        reschedulable = active and not (annotations and MIRROR_POD_ANNOTATION in annotations)
        if reschedulable and spec.owners:
            reschedulable = not any(owner.kind in UNMOVED_OWNER_KINDS for owner in spec.owners)
        # Most pods have no annotation and no priority: their cost is 1 and nothing forbids
        # disrupting them, without asking.
        plain = not annotations and "priority" not in (pod.get("spec") or {})
        # Every field, written into the open twin and closed (``scheduling.assembly``): the
        # dataclass's ``__init__`` took half of taking a pod's facts from its parse.
        facts: Any = object.__new__(_OpenPodFacts)
        facts.key = spec.key
        facts.node_name = spec.node_name
        facts.active = active
        facts.reschedulable = reschedulable
        facts.cost = 1.0 if plain else rescheduling_cost(pod)
        facts.do_not_disrupt = None if plain else do_not_disrupt_until(pod)
        facts.namespace = str(meta.get("namespace", ""))
        facts.labels = tuple(sorted(spec.labels.items())) if labels is None else labels
        facts.finished = finished
        facts.__class__ = PodFacts
        return facts  # type: ignore[no-any-return]


_OpenPodFacts: Final = open_twin(PodFacts)


def _ready(node: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def _annotated_do_not_disrupt(obj: Mapping[str, Any]) -> bool:
    annotations = _meta(obj).get("annotations") or {}
    return bool(annotations.get(wellknown.ANNOTATION_DO_NOT_DISRUPT) == "true")


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """One version of a Node as disruption reads it."""

    name: str
    labels: Mapping[str, Any]
    deleting: bool
    disrupted: bool
    """Tainted ``karpenter.sh/disrupted``: a command or a drain holds it."""
    ready: bool
    do_not_disrupt: bool
    """Annotated ``karpenter.sh/do-not-disrupt: "true"``."""

    @classmethod
    def read(cls, node: Mapping[str, Any]) -> NodeFacts:
        meta = _meta(node)
        return cls(
            name=str(meta.get("name", "")),
            labels=meta.get("labels") or {},
            deleting=bool(meta.get("deletionTimestamp")),
            disrupted=has_disrupted_taint(node),
            ready=_ready(node),
            do_not_disrupt=_annotated_do_not_disrupt(node),
        )


@dataclass(frozen=True, slots=True)
class ClaimFacts:
    """One version of a NodeClaim as disruption reads it."""

    name: str
    labels: Mapping[str, Any]
    nodepool: str
    node_name: str
    deleting: bool
    initialized: bool
    drifted: bool
    consolidatable: bool
    do_not_disrupt: bool
    expiry: tuple[timedelta, datetime | None] | None
    """Its ``expireAfter`` and creation time; ``None`` when it never expires."""
    interrupted: bool = False
    """``state.is_interrupted``: the cloud announced it will take the machine."""

    @classmethod
    def read(cls, claim: Mapping[str, Any]) -> ClaimFacts:
        meta = _meta(claim)
        labels = meta.get("labels") or {}
        status = claim.get("status") or {}
        # ``condition_true`` of each type, in one walk over the conditions.
        true = {
            kind
            for c in status.get("conditions") or []
            if c.get("status") == "True" and isinstance(kind := c.get("type"), str)
        }
        return cls(
            name=str(meta.get("name", "")),
            labels=labels,
            nodepool=str(labels.get(wellknown.LABEL_NODEPOOL) or ""),
            node_name=str(status.get("nodeName") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            initialized=NodeClaimConditionType.INITIALIZED in true,
            drifted=NodeClaimConditionType.DRIFTED in true,
            consolidatable=NodeClaimConditionType.CONSOLIDATABLE in true,
            do_not_disrupt=_annotated_do_not_disrupt(claim),
            expiry=_expiry(claim),
            interrupted=is_interrupted(claim),
        )

    def lifetime_remaining(self, now: datetime) -> float:
        """Share of its ``expireAfter`` the NodeClaim has left, in [0, 1] (1 when it never
        expires)."""
        if self.expiry is None:
            return 1.0
        total, created = self.expiry
        if total <= timedelta(0):
            return 0.0
        assert created is not None
        age = now - created
        return min(1.0, max(0.0, 1.0 - age / total))


def _expiry(claim: Mapping[str, Any]) -> tuple[timedelta, datetime | None] | None:
    raw = (claim.get("spec") or {}).get("expireAfter")
    created = _meta(claim).get("creationTimestamp")
    if not raw or raw == "Never" or not created:
        return None
    total = _duration(str(raw))
    if total is None:
        return None
    if total <= timedelta(0):
        return (total, None)
    return (total, parse_timestamp(str(created)))


@functools.lru_cache(maxsize=256)
def _duration(raw: str) -> timedelta | None:
    """``parse_duration(raw)``, ``None`` when it is not a duration: a NodePool's few
    ``expireAfter`` values, read for each of its NodeClaims."""
    try:
        return parse_duration(raw)
    except DurationError:
        return None


def lifetime_remaining(nodeclaim: Mapping[str, Any], now: datetime) -> float:
    """Share of its ``expireAfter`` a NodeClaim has left, in [0, 1] (1 when it never expires)."""
    return ClaimFacts.read(nodeclaim).lifetime_remaining(now)
