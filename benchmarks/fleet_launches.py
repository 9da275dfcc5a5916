"""``benchmarks/fleet.py``'s replicas phase: double launches counted exactly, not inferred.

What the shard fence is for (``core/fleet/fencing.py``): a replica writes to a workload cluster
only while it holds that cluster's Lease, so two replicas never both act on one cluster's
pending pods. The failure it stops is therefore a NodeClaim created for a cluster by a replica
that was not, at that moment, the holder of the cluster's Lease in the management cluster. That
is what this module counts, from two records kept while the phase runs:

- ``LeaseHistory``: every write of a cluster shard Lease the management API server accepted,
  with its ``time.monotonic()`` and the ``holderIdentity`` it left (wrapping the server's write
  verbs in the benchmark's process, so the record is the server's own order of writes);
- ``ClaimCreatesFront``: every NodeClaim create a workload cluster's HTTP front answered with
  201, with its arrival time (the same monotonic clock, in whichever process serves it) and the
  ``User-Agent``, which names the replica (``run`` sets ``karpenter-capi/VERSION (IDENTITY)``).

A create is a **double launch** when the Lease's holder at its arrival was another replica, or
nobody (released, or never acquired). Counting NodeClaims beyond the pods' need, as before,
could not tell a double launch from a launch-timeout replacement on a starved emulation.
"""

from __future__ import annotations

import bisect
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from benchmarks.fleet_requests import TallyFront
from karpenter_capi.core.fleet.sharding import ANNOTATION_CLUSTER, LABEL_SHARD, ROLE_CLUSTER
from karpenter_capi.core.kube.resources import LEASES, NODECLAIMS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront, ServedRequest

_IDENTITY = re.compile(r"\(([^()]*)\)\s*$")


def identity_of(agent: str) -> str:
    """The replica a ``User-Agent`` names (``karpenter-capi/0.1.0 (replica-1)``), or ``""``."""
    found = _IDENTITY.search(agent)
    return found.group(1) if found else ""


def _shard_lease(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(cluster key, holder) of a cluster shard Lease, or None for any other object."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(LABEL_SHARD) != ROLE_CLUSTER:
        return None
    key = (meta.get("annotations") or {}).get(ANNOTATION_CLUSTER)
    if not key:
        return None
    return str(key), str((obj.get("spec") or {}).get("holderIdentity") or "")


class LeaseHistory:
    """Each cluster's shard Lease holder over time, as the management server wrote it."""

    def __init__(self, server: InMemoryAPIServer, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._times: dict[str, list[float]] = {}
        self._holders: dict[str, list[str]] = {}
        self._writes: dict[str, list[tuple[float, str]]] = {}
        for verb in ("create", "update", "patch"):
            self._wrap(server, verb)

    def _wrap(self, server: InMemoryAPIServer, verb: str) -> None:
        inner = getattr(server, verb)

        def write(resource: Any, *args: Any, **kwargs: Any) -> Any:
            written = inner(resource, *args, **kwargs)
            if resource.plural == LEASES.plural and resource.group == LEASES.group:
                self.record(written, self._clock())
            return written

        setattr(server, verb, write)

    def record(self, lease: Mapping[str, Any], at: float) -> None:
        found = _shard_lease(lease)
        if found is None:
            return
        key, holder = found
        with self._lock:
            self._writes.setdefault(key, []).append((at, holder))
            times = self._times.setdefault(key, [])
            holders = self._holders.setdefault(key, [])
            if holders and holders[-1] == holder and times[-1] <= at:
                return  # a renewal: the holder has not changed
            index = bisect.bisect_right(times, at)
            times.insert(index, at)
            holders.insert(index, holder)

    def holder_at(self, key: str, at: float) -> str:
        """Who held ``key``'s Lease at ``at`` (``""``: nobody yet, or released)."""
        with self._lock:
            times = self._times.get(key, [])
            index = bisect.bisect_right(times, at)
            return self._holders[key][index - 1] if index else ""

    def takeover(self, key: str, victim: str, killed_at: float) -> dict[str, float] | None:
        """For a cluster ``victim`` held when it was killed at ``killed_at``: its last renewal
        before, and the first write after by another replica (seconds from the kill), or
        None if no one took it."""
        with self._lock:
            writes = list(self._writes.get(key, ()))
        renewed = max((at for at, who in writes if who == victim and at <= killed_at), default=None)
        taken = next(((at, who) for at, who in writes if at > killed_at and who != victim), None)
        if renewed is None or taken is None:
            return None
        return {
            "last_renewal": round(renewed - killed_at, 3),
            "taken": round(taken[0] - killed_at, 3),
        }

    def changes(self) -> int:
        """Holder changes recorded (first acquisitions included)."""
        with self._lock:
            return sum(len(h) for h in self._holders.values())


class ClaimCreatesFront(TallyFront):
    """A ``TallyFront`` that also keeps the NodeClaim creates it answered with 201."""

    def __init__(self, server: InMemoryAPIServer, **kwargs: Any) -> None:
        super().__init__(server, **kwargs)

    def record(self, request: ServedRequest) -> None:
        self.tally.add(request)
        if (
            request.method == "POST"
            and request.status == 201
            and request.path.endswith(f"/{NODECLAIMS.plural}")
        ):
            HttpFront.record(self, request)

    def creates(self) -> list[tuple[float, str]]:
        """(arrival time, User-Agent) of every NodeClaim created through this front."""
        return [(r.at, r.agent) for r in self.requests]


def double_launches(
    creates: Mapping[str, Iterable[tuple[float, str]]], history: LeaseHistory
) -> dict[str, Any]:
    """``creates``: cluster key -> (arrival, User-Agent) of its NodeClaim creates. Each create
    set against the Lease's holder when it arrived (module docstring)."""
    by_replica: dict[str, int] = {}
    doubles: list[dict[str, Any]] = []
    total = 0
    for key, answered in creates.items():
        for at, agent in answered:
            total += 1
            who = identity_of(agent)
            by_replica[who or "?"] = by_replica.get(who or "?", 0) + 1
            holder = history.holder_at(key, at)
            if not who or who != holder:
                doubles.append({"cluster": key, "at": round(at, 3), "by": who, "holder": holder})
    return {
        "double_launches": len(doubles),
        "nodeclaims_created": total,
        "created_by_replica": dict(sorted(by_replica.items())),
        "lease_holder_changes": history.changes(),
        "examples": doubles[:10],
    }
