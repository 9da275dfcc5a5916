"""Which Machine belongs to which NodeClaim, recorded in the API so any process can read it.

A replica change makes Cluster API create *some* Machine later, with no way to say which NodeClaim
asked for it (design decision 3, "Launch never waits"). So every Machine of a scalable resource is
interchangeable, and a NodeClaim takes one by writing its name on it: the label
``node.cluster.x-k8s.io/karpenter-member`` plus the annotations
``karpenter.cluster.x-k8s.io/nodeclaim`` (and ``-uid``), in one merge patch carrying the Machine's
resourceVersion as precondition. Two NodeClaims racing for one Machine cannot both win; the loser
re-reads and takes another. The Machine side is the durable truth: a restarted controller finds a
NodeClaim's Machine there even if the NodeClaim never recorded it.

A Machine is *claimable* only if it is free (no NodeClaim named on it, no member label), alive
(no deletionTimestamp, no ``cluster.x-k8s.io/delete-machine``) and new: created no earlier than
the NodeClaim that takes it. The last rule keeps the replicas a user runs by hand (and any
Machine that existed before the request) out of Karpenter's hands; it compares the Machine's
and the NodeClaim's creationTimestamps, so it assumes the management and workload API servers
agree on the time to the second. The one exception is a Machine nobody claimed for the
plugin's ``unclaimed_ttl`` (``unclaimed``): a NodeClaim left without a Machine may adopt it.

``match`` pairs the waiting NodeClaims of one resource with its claimable Machines, oldest
NodeClaim first, each taking the oldest Machine it may. Every process computes the same
pairing from the same objects, so concurrent launches mostly reach for different Machines and
the precondition only has to settle the rare stale read. The pairing is maximal: a Machine is
left unpaired only when every remaining NodeClaim is newer than it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, Final

from karpenter_capi.plugin_api import NodeClaim
from karpenter_capi.plugin_api.karpenter import parse_timestamp, wellknown
from karpenter_capi.plugin_api.kube import JsonObject

LABEL_MEMBER: Final = wellknown.LABEL_KARPENTER_MEMBER
ANNOTATION_NODECLAIM: Final = "karpenter.cluster.x-k8s.io/nodeclaim"
"""On a Machine: the name of the NodeClaim it is bound to."""
ANNOTATION_NODECLAIM_UID: Final = "karpenter.cluster.x-k8s.io/nodeclaim-uid"
"""On a Machine: the uid of that NodeClaim (a later NodeClaim of the same name is another)."""
ANNOTATION_MACHINE: Final = "cluster.x-k8s.io/machine"
"""On a NodeClaim: ``<namespace>/<name>`` of its Machine, as the Go provider records it."""
ANNOTATION_SCALABLE_RESOURCE: Final = "karpenter.cluster.x-k8s.io/scalable-resource"
"""On a NodeClaim: ``Kind/namespace/name`` of the scalable resource it waits on (its intent)."""
ANNOTATION_REQUESTED_AT: Final = "karpenter.cluster.x-k8s.io/scalable-resource-requested-at"
"""On a NodeClaim: when it started waiting on that resource (RFC 3339), for the fallback."""
ANNOTATION_ORPHANED_INSTANCE: Final = "karpenter.cluster.x-k8s.io/orphaned-instance"
"""On the stand-in NodeClaim the garbage collector hands to the delete hook."""
ANNOTATION_DELETE_MACHINE: Final = wellknown.ANNOTATION_CAPI_DELETE_MACHINE

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
LAUNCH_UNDER_WAY: Final = frozenset({"", "AwaitingReconciliation", "Launching"})
"""Reasons of a NodeClaim's ``Launched`` condition while the core may still call ``create``
for it (none yet, the core's initial one, its own while the plugin launches). Any other is the
core saying it could not (its NodePool missing or invalid, its requirements unreadable, the
last call failed): it retries later, after a backoff."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _str_map(value: Any) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items() if v is not None}


def _time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value:
        try:
            return parse_timestamp(value)
        except ValueError:
            return EPOCH
    return EPOCH


@dataclass(frozen=True)
class MachineFacts:
    """What the launch and delete logic need to know about one Machine.

    Facts are immutable and the plugin's mirrors hand the same ones to every call until the
    Machine changes, so the derived ones (``cached_property``) are computed once per version.
    """

    raw: Mapping[str, Any]
    namespace: str
    name: str
    uid: str
    resource_version: str
    created: datetime
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    provider_id: str
    phase: str
    deleting: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @cached_property
    def claim(self) -> str:
        """The NodeClaim this Machine is bound to, ``""`` when none."""
        return self.annotations.get(ANNOTATION_NODECLAIM, "")

    @cached_property
    def claim_uid(self) -> str:
        return self.annotations.get(ANNOTATION_NODECLAIM_UID, "")

    @cached_property
    def member(self) -> bool:
        return LABEL_MEMBER in self.labels

    @cached_property
    def marked(self) -> bool:
        """Carries ``cluster.x-k8s.io/delete-machine``: the next scale-down removes it first."""
        return ANNOTATION_DELETE_MACHINE in self.annotations

    @cached_property
    def alive(self) -> bool:
        """Counted as a replica that stays: neither deleting nor marked for deletion."""
        return not self.deleting and not self.marked

    @cached_property
    def free(self) -> bool:
        """Nobody's Machine and going nowhere; claimable by a NodeClaim no newer than it."""
        return self.alive and not self.claim and not self.member

    @property
    def failed(self) -> bool:
        """The infrastructure gave up on it (phase ``Failed`` or a v1beta1 failure reason)."""
        status = self.raw.get("status")
        failure = status.get("failureReason") if isinstance(status, Mapping) else None
        return self.phase == "Failed" or bool(failure)

    def bound_to(self, claim: ClaimFacts) -> bool:
        """Bound to this NodeClaim (by name, and by uid when both sides know it)."""
        if not self.claim or self.claim != claim.name:
            return False
        return not (self.claim_uid and claim.uid and self.claim_uid != claim.uid)


def machine_facts(raw: Mapping[str, Any]) -> MachineFacts:
    meta = _meta(raw)
    spec = raw.get("spec")
    status = raw.get("status")
    return MachineFacts(
        raw=raw,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        created=_time(meta.get("creationTimestamp")),
        labels=_str_map(meta.get("labels")),
        annotations=_str_map(meta.get("annotations")),
        provider_id=str((spec.get("providerID") if isinstance(spec, Mapping) else "") or ""),
        phase=str((status.get("phase") if isinstance(status, Mapping) else "") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
    )


@dataclass(frozen=True)
class ClaimFacts:
    """What the launch and delete logic need to know about one NodeClaim."""

    name: str
    uid: str
    created: datetime
    deleting: bool
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    provider_id: str
    node_class_kind: str = ""
    """The kind of its ``spec.nodeClassRef`` (which plugin launches it)."""
    launch_reason: str = ""
    """The reason of its ``Launched`` condition while not ``True``."""

    @property
    def launch_held(self) -> bool:
        """The core said it could not launch the NodeClaim yet (``LAUNCH_UNDER_WAY``): no
        ``create`` call for it is about to come."""
        return self.launch_reason not in LAUNCH_UNDER_WAY

    @cached_property
    def intent(self) -> str:
        """``Kind/namespace/name`` of the resource it waits on, ``""`` when none."""
        return self.annotations.get(ANNOTATION_SCALABLE_RESOURCE, "")

    @cached_property
    def requested_at(self) -> datetime | None:
        raw = self.annotations.get(ANNOTATION_REQUESTED_AT, "")
        if not raw:
            return None
        moment = _time(raw)
        return None if moment == EPOCH else moment

    @cached_property
    def machine_ref(self) -> tuple[str, str] | None:
        """``(namespace, name)`` of the Machine the NodeClaim recorded, if any."""
        value = self.annotations.get(ANNOTATION_MACHINE, "")
        namespace, slash, name = value.partition("/")
        return (namespace, name) if slash and namespace and name else None

    @property
    def order(self) -> tuple[datetime, str]:
        return (self.created, self.name)


def claim_facts(obj: NodeClaim | Mapping[str, Any]) -> ClaimFacts:
    """Facts of a NodeClaim given as the model a hook receives or as a raw JSON dict (a
    mirror's)."""
    if isinstance(obj, NodeClaim):
        return _model_facts(obj)
    if not isinstance(obj, Mapping):
        raise TypeError(f"not a NodeClaim: {type(obj).__name__}")
    raw = obj
    meta = _meta(raw)
    status = raw.get("status")
    spec = raw.get("spec")
    ref = spec.get("nodeClassRef") if isinstance(spec, Mapping) else None
    return ClaimFacts(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        created=_time(meta.get("creationTimestamp")),
        deleting=bool(meta.get("deletionTimestamp")),
        labels=_str_map(meta.get("labels")),
        annotations=_str_map(meta.get("annotations")),
        provider_id=str((status.get("providerID") if isinstance(status, Mapping) else "") or ""),
        node_class_kind=str((ref.get("kind") if isinstance(ref, Mapping) else "") or ""),
        launch_reason=_launch_reason(status),
    )


def _model_facts(claim: NodeClaim) -> ClaimFacts:
    meta = claim.metadata
    launched = claim.condition("Launched")
    return ClaimFacts(
        name=claim.name,
        uid=meta.uid or "",
        created=meta.creation_timestamp or EPOCH,
        deleting=claim.is_deleting,
        labels=dict(meta.labels),
        annotations=dict(meta.annotations),
        provider_id=claim.status.provider_id or "",
        node_class_kind=claim.spec.node_class_ref.kind,
        launch_reason="" if launched is None or launched.is_true else launched.reason,
    )


def _launch_reason(status: Any) -> str:
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == "Launched":
            return "" if condition.get("status") == "True" else str(condition.get("reason") or "")
    return ""


def match(
    claims: Iterable[ClaimFacts],
    machines: Iterable[MachineFacts],
    *,
    unclaimed_before: datetime | None = None,
) -> dict[str, MachineFacts]:
    """NodeClaim name -> the free Machine it takes (see the module docstring for the rule).

    Greedy over Machines oldest first, each going to the oldest unpaired NodeClaim not newer
    than it: for this "created no earlier than" constraint that is a maximum matching.

    A free Machine created before ``unclaimed_before`` has waited longer than any NodeClaim
    waits for its Machine, so it was made for one that is gone (``unclaimed``): the NodeClaims
    left unpaired adopt such Machines, oldest first, whatever their age. They are paired last,
    so that adopting one never takes a new Machine's NodeClaim away from it.
    """
    waiting = sorted(claims, key=lambda claim: claim.order)
    free = sorted((m for m in machines if m.free), key=lambda m: (m.created, m.name))
    pairs: dict[str, MachineFacts] = {}
    next_claim = 0
    leftover: list[MachineFacts] = []
    for machine in free:
        if next_claim < len(waiting) and waiting[next_claim].created <= machine.created:
            pairs[waiting[next_claim].name] = machine
            next_claim += 1
        else:
            leftover.append(machine)
    if unclaimed_before is not None:
        unpaired = (claim for claim in waiting if claim.name not in pairs)
        adoptable = (m for m in leftover if m.created < unclaimed_before)
        for claim, machine in zip(unpaired, adoptable, strict=False):
            pairs[claim.name] = machine
    return pairs


def bind_patch(
    machine: MachineFacts, claim: ClaimFacts, *, mark_at: str | None = None
) -> JsonObject:
    """The one write that binds ``machine`` to ``claim`` (optionally also marking it for
    deletion, for a NodeClaim cancelled before it was bound)."""
    annotations = {ANNOTATION_NODECLAIM: claim.name}
    if claim.uid:
        annotations[ANNOTATION_NODECLAIM_UID] = claim.uid
    if mark_at is not None:
        annotations[ANNOTATION_DELETE_MACHINE] = mark_at
    return {
        "metadata": {
            "resourceVersion": machine.resource_version,
            "labels": {LABEL_MEMBER: ""},
            "annotations": annotations,
        }
    }


def mark_patch(machine: MachineFacts, mark_at: str) -> JsonObject:
    return {
        "metadata": {
            "resourceVersion": machine.resource_version,
            "annotations": {ANNOTATION_DELETE_MACHINE: mark_at},
        }
    }


def unmark_patch(machine: MachineFacts) -> JsonObject:
    return {
        "metadata": {
            "resourceVersion": machine.resource_version,
            "annotations": {ANNOTATION_DELETE_MACHINE: None},
        }
    }


def bound_machine(
    claim: ClaimFacts, machines: Sequence[MachineFacts], *, include_deleting: bool = False
) -> MachineFacts | None:
    """The Machine bound to ``claim`` among ``machines`` (alive ones first)."""
    found = [m for m in machines if m.bound_to(claim) and (include_deleting or not m.deleting)]
    found.sort(key=lambda m: (m.deleting, m.created, m.name))
    return found[0] if found else None
