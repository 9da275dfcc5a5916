"""What a disruption pass reads of each pod, Node and NodeClaim, read once per version.

A pass over 10,000 nodes and 70,000 pods read every object's JSON again each time (is the pod
active, may it move, what does it cost to move, does it forbid disruption; is the NodeClaim
initialized, drifted, when does it expire; what does its Node cost), though almost nothing
changes between two passes 10 s apart. Here each version of an object (``uid`` and
``resourceVersion``) is read once into a small frozen value kept across passes
(``PassFacts``, held by the ``ParsedCluster`` the controller keeps, as parsed pods are), and a
pass only evaluates what depends on the time (a do-not-disrupt duration, a NodeClaim's share of
life left) over those values. An object without both (a hand-made one) is read afresh.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.duration import DurationError, parse_duration
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.provisioning.state import (
    ClusterSnapshot,
    ParsedCluster,
    has_disrupted_taint,
    is_interrupted,
    is_reschedulable,
)
from karpenter_capi.core.scheduling.kept import Kept
from karpenter_capi.core.scheduling.podspec import PodObject, pod_key, version_of

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
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _is_active_phase(pod: PodObject) -> bool:
    """Not finished: a pod the pass parses (bound, or pending)."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


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


def cluster_versions(snapshot: ClusterSnapshot) -> tuple[object, ...] | None:
    """Every pod's, Node's and NodeClaim's ``(uid, resourceVersion)``, in order: equal for two
    snapshots only when they hold the same versions of the same objects. ``None`` when some
    object has no version (then nothing can be known to be unchanged)."""
    keys: list[object] = []
    for objects in (snapshot.pods, snapshot.nodes, snapshot.nodeclaims):
        for obj in objects:
            meta = obj.get("metadata") or {}
            uid, version = meta.get("uid"), meta.get("resourceVersion")
            if not uid or not version:
                return None
            keys.append((str(uid), str(version)))
        keys.append(None)  # where one kind ends
    return tuple(keys)


class PassFacts:
    """Facts by object version, kept across passes; ``reads`` counts the objects read.

    ``derived`` keeps what a pass computed from the whole cluster (its pods grouped by node,
    the simulator's reading), with the ``cluster_versions`` it was computed from: a pass over
    the same versions takes it as it is (``remember``).
    """

    def __init__(self) -> None:
        self._pods: Kept[tuple[str, str], PodFacts] = Kept()
        self._nodes: Kept[tuple[str, str], NodeFacts] = Kept()
        self._claims: Kept[tuple[str, str], ClaimFacts] = Kept()
        self._derived: dict[str, tuple[object, Any]] = {}
        self.versions: tuple[object, ...] | None = None
        """``cluster_versions`` of this pass's cluster (``begin``)."""
        self._claim_versions: tuple[object, ...] | None = None
        self._lists: tuple[object, object, object] = (None, None, None)
        self._read: tuple[list[PodFacts], list[NodeFacts], list[ClaimFacts]] | None = None
        """The facts of this pass's pods, Nodes and NodeClaims, in their order (``read_all``)."""
        self.reads = 0
        self.reused = 0
        """How many times ``remember`` found its value kept (for tests and figures)."""

    def remember(self, slot: str, key: object | None, build: Callable[[], T]) -> T:
        """``build()``, or what it gave for the same ``key`` (``None``: never kept)."""
        if key is not None:
            found = self._derived.get(slot)
            if found is not None and (found[0] is key or found[0] == key):
                self.reused += 1
                return found[1]  # type: ignore[no-any-return]
        value = build()
        if key is None:
            self._derived.pop(slot, None)
        else:
            self._derived[slot] = (key, value)
        return value

    def last(self, slot: str) -> object:
        """What ``remember`` last kept in ``slot``, whatever it was kept for (``None``: none)."""
        found = self._derived.get(slot)
        return None if found is None else found[1]

    def new_round(self) -> None:
        """A new pass: facts no object asked for during the last one go at the end of it."""
        for kept in (self._pods, self._nodes, self._claims):
            kept.new_round()

    def begin(self, snapshot: ClusterSnapshot) -> bool:
        """A new pass over ``snapshot``; whether it holds the very versions of the last pass.
        Then its facts stay as they are: what it derived is taken whole, so they are not asked
        for again and must not age out."""
        versions = cluster_versions(snapshot)
        same = versions is not None and versions == self.versions
        if not same:
            self.new_round()
            self._read = None
        self.versions = versions
        self._claim_versions = None
        self._lists = (snapshot.pods, snapshot.nodes, snapshot.nodeclaims)
        return same

    def read_all(self, snapshot: ClusterSnapshot, parsed: ParsedCluster | None) -> None:
        """Read each object version of ``snapshot`` that no earlier pass read: the pod's facts
        and, unless it finished, its parse (``parsed.specs``); each Node's and NodeClaim's
        facts, each Node's allocatable and labels as requirements.

        The pass would read them where it first needs them; read first, what reading costs
        (work in proportion to the objects that changed, what informer events bring) is told
        apart from what the pass itself costs (``PassReport.read_seconds``). An object without
        a version (a hand-made cluster) leaves it all to the pass. Call after ``begin``.
        """
        if self.versions is None:
            return
        versions: tuple[Any, ...] = self.versions
        pods, nodes, claims = snapshot.pods, snapshot.nodes, snapshot.nodeclaims
        # ``versions`` holds the pods', a None, the Nodes', a None, the NodeClaims'.
        start = len(pods) + 1
        pod_facts: list[PodFacts] = []
        for pod, key in zip(pods, versions[: start - 1], strict=True):
            found = self._pods.get(key)
            if found is None:
                self.reads += 1
                found = PodFacts.read(pod)
                self._pods.put(key, found)
                if parsed is not None and _is_active_phase(pod):
                    parsed.specs.get(pod)
            pod_facts.append(found)
        node_facts: list[NodeFacts] = []
        for node, key in zip(nodes, versions[start : start + len(nodes)], strict=True):
            read = self._nodes.get(key)
            if read is None:
                self.reads += 1
                read = NodeFacts.read(node)
                self._nodes.put(key, read)
                if parsed is not None:
                    meta = _meta(node)
                    parsed.allocatable(node)
                    labels = dict(meta.get("labels") or {})
                    labels.setdefault(wellknown.LABEL_HOSTNAME, str(meta.get("name")))
                    parsed.label_requirements(node, labels)
            node_facts.append(read)
        start += len(nodes) + 1
        claim_facts: list[ClaimFacts] = []
        for claim, key in zip(claims, versions[start:-1], strict=True):
            kept = self._claims.get(key)
            if kept is None:
                self.reads += 1
                kept = ClaimFacts.read(claim)
                self._claims.put(key, kept)
            claim_facts.append(kept)
        self._read = (pod_facts, node_facts, claim_facts)

    def pods(self, pods: Iterable[PodObject]) -> Iterable[tuple[PodObject, PodFacts]]:
        """Each of ``pods`` with its facts, in order: those ``read_all`` read when they are
        this pass's pods (no version looked up again), else each one's asked for."""
        if self._read is not None and pods is self._lists[0]:
            return zip(pods, self._read[0], strict=True)
        return ((pod, self.pod(pod)) for pod in pods)

    def nodes(self, nodes: Iterable[Mapping[str, Any]]) -> Iterable[tuple[Any, NodeFacts]]:
        """Each of ``nodes`` with its facts, in order (see ``pods``)."""
        if self._read is not None and nodes is self._lists[1]:
            return zip(nodes, self._read[1], strict=True)
        return ((node, self.node(node)) for node in nodes)

    def claims(self, claims: Iterable[Mapping[str, Any]]) -> Iterable[tuple[Any, ClaimFacts]]:
        """Each of ``claims`` with its facts, in order (see ``pods``)."""
        if self._read is not None and claims is self._lists[2]:
            return zip(claims, self._read[2], strict=True)
        return ((claim, self.claim(claim)) for claim in claims)

    def claim_versions(self, nodeclaims: object) -> tuple[object, ...] | None:
        """The NodeClaims' part of ``versions_of``, when ``nodeclaims`` are this pass's:
        equal for two passes only when they hold the same versions of the same NodeClaims."""
        if self.versions is None or nodeclaims is not self._lists[2]:
            return None
        if self._claim_versions is None:
            # The NodeClaims' versions come last, after the pods', the Nodes' and a None each.
            start = len(self.versions) - len(self._lists[2]) - 1  # type: ignore[arg-type]
            self._claim_versions = self.versions[start:]
        return self._claim_versions

    def has_read(self, snapshot: ClusterSnapshot) -> bool:
        """Whether ``read_all`` read this very snapshot's lists: then ``pods``, ``nodes`` and
        ``claims`` hand out its facts without a lookup, a walk cheaper than one of the raw
        objects."""
        return (
            self._read is not None
            and self.versions_of(snapshot.pods, snapshot.nodes, snapshot.nodeclaims) is not None
        )

    def versions_of(
        self,
        pods: object,
        nodes: object | None = None,
        nodeclaims: object | None = None,
    ) -> tuple[object, ...] | None:
        """This pass's ``cluster_versions`` when ``pods`` (and ``nodes``, ``nodeclaims`` when
        given) are the very lists ``begin`` was given; else ``None`` (another cluster: nothing
        derived from this pass's may be taken for it)."""
        pass_pods, pass_nodes, pass_claims = self._lists
        if pods is not pass_pods:
            return None
        if nodes is not None and nodes is not pass_nodes:
            return None
        if nodeclaims is not None and nodeclaims is not pass_claims:
            return None
        return self.versions

    def _of(
        self, kept: Kept[tuple[str, str], T], obj: Mapping[str, Any], read: Callable[[Any], T]
    ) -> T:
        key = version_of(obj)
        if key is None:
            self.reads += 1
            return read(obj)
        found = kept.get(key)
        if found is None:
            self.reads += 1
            found = read(obj)
            kept.put(key, found)
        return found

    def pod(self, pod: PodObject) -> PodFacts:
        return self._of(self._pods, pod, PodFacts.read)

    def node(self, node: Mapping[str, Any]) -> NodeFacts:
        return self._of(self._nodes, node, NodeFacts.read)

    def claim(self, claim: Mapping[str, Any]) -> ClaimFacts:
        return self._of(self._claims, claim, ClaimFacts.read)


def pass_facts(parsed: ParsedCluster | None) -> PassFacts:
    """The facts ``parsed`` keeps across passes (fresh ones without it)."""
    if parsed is None:
        return PassFacts()
    if not isinstance(parsed.facts, PassFacts):
        parsed.facts = PassFacts()
    return parsed.facts
