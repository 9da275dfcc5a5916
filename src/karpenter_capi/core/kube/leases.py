"""The ``coordination.k8s.io/v1`` Lease record as client-go's leader election reads and writes it.

Two parts of the controller hold Leases: leader election (``core.runtime.leader``, one Lease for
the whole controller) and fleet sharding (``core.fleet.sharding``, one Lease per workload
cluster and one per replica). Both must follow the same rules so that a Go and a Python replica,
or the two parts, read each other's records alike: the record is compared, never interpreted
(another replica's clock may be skewed), and a record is expired only once it has stayed
unchanged for its duration on the *reader's* monotonic clock since the reader first saw it.
This module holds that shared vocabulary; the policies (when to renew, when to give up) stay
with their owners.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.resources import LEASES

RELEASED_LEASE_SECONDS: Final = 1
"""What a released Lease advertises, as client-go writes it, so that clients which only look at
the duration (not at the empty holder) also take over quickly."""


@dataclass(frozen=True, slots=True)
class LeaderElectionRecord:
    """The Lease spec fields leader election reads and writes.

    Times are kept as the strings found on the wire: they are only compared for change, never
    interpreted (another replica's clock may be skewed).
    """

    holder_identity: str = ""
    lease_duration_seconds: int | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int = 0

    @classmethod
    def from_lease(cls, lease: JsonObject) -> LeaderElectionRecord:
        """Read a Lease's spec; a mistyped field counts as absent (bad input never crashes)."""
        spec = lease.get("spec")
        if not isinstance(spec, dict):
            spec = {}
        return cls(
            holder_identity=_str(spec.get("holderIdentity")) or "",
            lease_duration_seconds=_int(spec.get("leaseDurationSeconds")),
            acquire_time=_str(spec.get("acquireTime")),
            renew_time=_str(spec.get("renewTime")),
            lease_transitions=_int(spec.get("leaseTransitions")) or 0,
        )

    def to_spec(self) -> JsonObject:
        spec: JsonObject = {
            "holderIdentity": self.holder_identity,
            "leaseTransitions": self.lease_transitions,
        }
        if self.lease_duration_seconds is not None:
            spec["leaseDurationSeconds"] = self.lease_duration_seconds
        if self.acquire_time is not None:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            spec["renewTime"] = self.renew_time
        return spec


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    # bool is an int in Python but never a valid count on the wire.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def lease_seconds(duration: float) -> int:
    """The whole seconds a Lease advertises for ``duration``: rounded up, so that others wait at
    least as long as the holder was configured for, never less."""
    return max(1, math.ceil(duration))


def claim(
    identity: str, seconds: int, stamp: str, held: LeaderElectionRecord | None
) -> LeaderElectionRecord:
    """The record ``identity`` writes to take or renew a Lease whose current record is ``held``.

    A renewal keeps the original acquireTime and the transition count; a take-over (or a
    first write, ``held`` None) starts a new term and counts one more transition.
    """
    if held is not None and held.holder_identity == identity:
        return LeaderElectionRecord(
            holder_identity=identity,
            lease_duration_seconds=seconds,
            acquire_time=held.acquire_time or stamp,
            renew_time=stamp,
            lease_transitions=held.lease_transitions,
        )
    return LeaderElectionRecord(
        holder_identity=identity,
        lease_duration_seconds=seconds,
        acquire_time=stamp,
        renew_time=stamp,
        lease_transitions=0 if held is None else held.lease_transitions + 1,
    )


def released(held: LeaderElectionRecord, stamp: str) -> LeaderElectionRecord:
    """The record of a Lease handed back (client-go's ``release``): no holder, a short duration."""
    return LeaderElectionRecord(
        holder_identity="",
        lease_duration_seconds=RELEASED_LEASE_SECONDS,
        acquire_time=stamp,
        renew_time=stamp,
        lease_transitions=held.lease_transitions,
    )


def new_lease(
    name: str,
    namespace: str,
    record: LeaderElectionRecord,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> JsonObject:
    """A Lease to create, holding ``record``."""
    metadata: JsonObject = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": LEASES.api_version,
        "kind": LEASES.kind,
        "metadata": metadata,
        "spec": record.to_spec(),
    }


def with_record(lease: JsonObject, record: LeaderElectionRecord) -> JsonObject:
    """``lease`` carrying ``record``, to PUT: its resourceVersion makes the write conditional.

    Spec fields leader election does not own (``strategy``, ``preferredHolder``) are kept.
    """
    body = dict(lease)
    spec = lease.get("spec")
    body["spec"] = {**(spec if isinstance(spec, dict) else {}), **record.to_spec()}
    return body


@dataclass(frozen=True, slots=True)
class Observation:
    """A record as one reader saw it, and when (on the reader's monotonic clock) it first did."""

    record: LeaderElectionRecord
    since: float

    def then(self, record: LeaderElectionRecord, now: float) -> Observation:
        """This observation after reading ``record`` at ``now``: the clock restarts on change."""
        return self if record == self.record else Observation(record, now)

    def expires_at(self, default_seconds: float) -> float:
        """When the record, if it stays unchanged, may be taken over (``default_seconds`` when
        it advertises no valid duration)."""
        seconds = self.record.lease_duration_seconds
        if seconds is None or seconds <= 0:
            return self.since + default_seconds
        return self.since + seconds
