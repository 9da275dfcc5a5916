"""Which replica serves which workload cluster: a fleet sharded over ``coordination.k8s.io``.

In fleet mode N replicas share M workload clusters (issue 28 item 3). Two replicas serving the
same cluster would launch capacity twice for the same pending pods, so each cluster is served by
exactly one replica at a time; and replicas come and go, so the clusters are rebalanced as they
do. No home-made consensus: everything rests on Leases in the controller's own namespace and the
API server's optimistic concurrency (a write carries the resourceVersion it read; a 409 means
somebody else won), read by the client-go rules of ``core.kube.leases``:

- Every replica keeps a *membership* Lease (``karpenter-capi-member-…``), renewed every step,
  so each replica knows who is alive: a member is live while its record keeps changing.
- Every cluster has a *cluster* Lease (``karpenter-capi-cluster-<namespace>.<name>``, hashed
  when the name would be too long or invalid). Its holder serves the cluster. A replica takes a
  cluster Lease only when it is missing, released (no holder), its own, or has stayed unchanged
  for its duration on the taker's own monotonic clock; it never takes a live Lease from another.
- All replicas compute the same target from what they read (the clusters, the live members and
  the current holders): every member gets the floor or the ceiling of M/N clusters. A current
  holder keeps its clusters up to its share, so a joining replica moves only the ~M/N clusters
  it takes; which clusters move, and who takes a free one, is decided by rendezvous hashing on
  (cluster, member), so it is stable and needs no coordination.
- A replica hands a cluster over in two steps: it stops serving at once (``holds()`` turns
  false, so its fenced writes stop) and releases the Lease one step later, once its controllers
  have had a step to stop. The replica it goes to takes it on its next step.
- Fencing: ``holds()`` is false once ``renew_deadline`` has passed since the last successful
  write of the Lease was *sent*, as client-go's leader election judges ``IsLeader``. Others wait
  ``lease_duration`` (> ``renew_deadline``) from when they *saw* that write, so a replica that is
  partitioned, stuck or slow has stopped writing before anyone else may start.
- A step writes its cluster Leases side by side (``renew_workers`` at once, the held Lease
  renewed longest ago first, then the ones to take): one write after another made a step as
  long as the sum of their round trips, and under load longer than the renew deadline, so a
  replica fenced clusters it held itself and took a killed replica's late (50 s, not 20).
- ``release_all()`` on a graceful stop releases every cluster Lease and deletes the membership
  Lease, so the others take over on their next step instead of waiting a lease duration.

Membership Leases of crashed replicas, and cluster Leases of clusters no longer served, are
deleted once expired (with their resourceVersion as a precondition) so restarts leave nothing
behind.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import threading
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

from karpenter_capi.core.clock import Clock, format_micro_time
from karpenter_capi.core.kube.client import JsonObject, KubeClient, Preconditions
from karpenter_capi.core.kube.errors import AlreadyExists, ApiError, Conflict, Forbidden, NotFound
from karpenter_capi.core.kube.leases import (
    LeaderElectionRecord,
    Observation,
    claim,
    lease_seconds,
    new_lease,
    released,
    with_record,
)
from karpenter_capi.core.kube.resources import LEASES

log = logging.getLogger(__name__)

LABEL_SHARD: Final = "karpenter.cluster.x-k8s.io/shard"
"""On every Lease sharding owns: ``member`` or ``cluster``; one list selects them all."""
ROLE_MEMBER: Final = "member"
ROLE_CLUSTER: Final = "cluster"
ANNOTATION_CLUSTER: Final = "karpenter.cluster.x-k8s.io/cluster"
"""On a cluster Lease: the ``namespace/name`` it stands for, for a human (names may be hashed)."""

MEMBER_PREFIX: Final = "karpenter-capi-member-"
CLUSTER_PREFIX: Final = "karpenter-capi-cluster-"
_MAX_NAME: Final = 253
_HASH_CHARS: Final = 10
_DNS_SUBDOMAIN: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_CLUSTER_KEY: Final = re.compile(r"^[^/\s]+/[^/\s]+$")


def _lease_name(prefix: str, text: str) -> str:
    plain = prefix + text
    if len(plain) <= _MAX_NAME and _DNS_SUBDOMAIN.match(plain):
        return plain
    # Too long or not a DNS name (an identity holds ``_``): keep a readable part and make the
    # name unique with a hash of the whole text.
    digest = hashlib.sha256(text.encode()).hexdigest()[:_HASH_CHARS]
    room = _MAX_NAME - len(prefix) - 1 - _HASH_CHARS
    readable = re.sub(r"[^a-z0-9]+", "-", text.lower())[:room].strip("-")
    return f"{prefix}{readable}-{digest}" if readable else prefix + digest


def cluster_lease_name(cluster: str) -> str:
    """The Lease of a cluster ``namespace/name``: a valid DNS subdomain of at most 253 characters.

    A namespace holds no dot, so ``<namespace>.<name>`` names one cluster only.
    """
    return _lease_name(CLUSTER_PREFIX, cluster.replace("/", ".", 1))


def member_lease_name(identity: str) -> str:
    """The membership Lease of the replica ``identity``."""
    return _lease_name(MEMBER_PREFIX, identity)


@functools.lru_cache(maxsize=1 << 16)
def _score(cluster: str, member: str) -> int:
    """Rendezvous (highest random weight) hashing: every replica ranks the pairs alike."""
    digest = hashlib.sha256(f"{cluster}\n{member}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def assign(
    clusters: Collection[str], members: Collection[str], holders: Mapping[str, str]
) -> dict[str, str]:
    """Each cluster's member: every member gets ``floor`` or ``ceil`` of clusters/members.

    Pairs are granted greedily, current holders first (so a cluster moves only when its holder
    has more than its share), then by rendezvous score. A member is full at ``floor`` once the
    ``M mod N`` ceiling places are taken, which makes every member's load the floor or the
    ceiling and leaves no cluster out (a member not full at the end was never full, so it would
    have been granted any cluster left).
    """
    names = sorted(set(members))
    wanted = sorted(set(clusters))
    if not names:
        return {}
    floor, extra = divmod(len(wanted), len(names))
    pairs = sorted(
        (holders.get(cluster) != member, -_score(cluster, member), cluster, member)
        for cluster in wanted
        for member in names
    )
    load = dict.fromkeys(names, 0)
    chosen: dict[str, str] = {}
    for _, _, cluster, member in pairs:
        if cluster in chosen:
            continue
        if load[member] < floor:
            load[member] += 1
        elif load[member] == floor and extra > 0:
            load[member] += 1
            extra -= 1
        else:
            continue
        chosen[cluster] = member
    return chosen


@dataclass(frozen=True, slots=True)
class _Seen:
    """A Lease as last read or written (its resourceVersion), and its record's observation."""

    body: JsonObject
    observation: Observation

    @property
    def record(self) -> LeaderElectionRecord:
        return self.observation.record

    @property
    def role(self) -> str:
        labels = (self.body.get("metadata") or {}).get("labels")
        return str(labels.get(LABEL_SHARD, "")) if isinstance(labels, dict) else ""

    @property
    def resource_version(self) -> str | None:
        value = (self.body.get("metadata") or {}).get("resourceVersion")
        return value if isinstance(value, str) else None


class ShardCoordinator:
    """This replica's part of the fleet: which clusters it serves; see the module docstring.

    Drive it from one thread with ``step(clusters)`` every ``retry_period``; ``holds()`` may be
    called from any thread (the fenced clients of the clusters' controllers do, before every
    write). ``step`` never raises for API errors: what it cannot renew it stops serving once the
    renew deadline has passed.
    """

    def __init__(
        self,
        client: KubeClient,
        clock: Clock,
        *,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        renew_workers: int = 8,
    ) -> None:
        if not namespace or not identity:
            raise ValueError("fleet sharding needs the controller's namespace and an identity")
        if retry_period <= 0:
            raise ValueError("retry_period must be greater than zero")
        if lease_duration <= renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if renew_deadline <= retry_period:
            raise ValueError("renew_deadline must be greater than retry_period")
        if renew_workers < 1:
            raise ValueError("renew_workers must be at least 1")
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.renew_workers = renew_workers
        self._pool: ThreadPoolExecutor | None = None  # renews a step's Leases side by side
        self._client = client
        self._clock = clock
        self._seconds = lease_seconds(lease_duration)
        self._member_name = member_lease_name(identity)
        self._lock = threading.Lock()
        self._stopped = False
        self._joined = False
        self._write_failed = False  # this step: to say a failure again once writes recovered
        self._renewed: dict[str, float] = {}  # cluster -> when its last successful claim was sent
        self._releasing: set[str] = set()  # fenced last step; their Leases go back this step
        self._seen: dict[str, _Seen] = {}  # Lease name -> as last read or written
        self._warned: dict[str, str] = {}  # what failed -> the error last logged at WARNING

    # -- reads (any thread) ------------------------------------------------------------------

    def holds(self, cluster: str) -> bool:
        """Whether this replica may act on ``cluster`` *now*.

        False once ``renew_deadline`` has passed since its Lease was last renewed, even if the
        driving thread is stuck and has not noticed: a replica that may have lost the Lease
        must not write.
        """
        with self._lock:
            renewed = self._renewed.get(cluster)
            return (
                not self._stopped
                and renewed is not None
                and self._clock.monotonic() - renewed < self.renew_deadline
            )

    def held(self) -> frozenset[str]:
        """The clusters this replica may act on now."""
        with self._lock:
            if self._stopped:
                return frozenset()
            now = self._clock.monotonic()
            return frozenset(c for c, t in self._renewed.items() if now - t < self.renew_deadline)

    def next_expiry(self) -> float | None:
        """The first moment (this replica's monotonic clock) at which a Lease another replica
        holds will have expired if it stays unchanged; None when none will. The driver steps
        then, not at its next tick: a killed replica's clusters are taken as soon as they may
        be, not up to a retry period later. Call it from the driving thread, between steps."""
        now = self._clock.monotonic()
        expiries = [
            at
            for seen in list(self._seen.values())
            if seen.record.holder_identity not in ("", self.identity)
            and (at := seen.observation.expires_at(self.lease_duration)) > now
        ]
        return min(expiries, default=None)

    def lease_of(self, cluster: str) -> str:
        """``namespace/name`` of the Lease that guards ``cluster``, for messages."""
        return f"{self.namespace}/{cluster_lease_name(cluster)}"

    # -- the driver --------------------------------------------------------------------------

    def step(self, clusters: Collection[str]) -> frozenset[str]:
        """One round: renew membership, read the Leases, hand over, take and renew as due.

        ``clusters`` are the ``namespace/name`` keys the fleet serves now. Returns the clusters
        this replica serves after the round; start the controllers of new ones, stop the others.
        """
        if self._stopped:
            return frozenset()
        wanted = self._valid(clusters)
        self._expire_holds()
        if not self._read_leases():
            return self.held()
        self._renew_membership()
        if not self._joined:
            # Join first, take clusters from the next step on: replicas that start together
            # then see each other before taking any, instead of one taking all and handing
            # most of them back a step later.
            self._joined = True
            return self.held()
        members, holders = self._membership(wanted)
        mine = {c for c, m in assign(wanted, members, holders).items() if m == self.identity}
        for cluster in sorted(self._releasing - mine):
            self._release(cluster)
        with self._lock:
            fenced = set(self._renewed) - mine
            for cluster in fenced:
                del self._renewed[cluster]
        for cluster in sorted(fenced):
            why = "no longer served" if cluster not in wanted else f"{len(members)} replicas share"
            log.info("%s hands cluster %s over (%s)", self.identity, cluster, why)
        self._releasing = fenced
        self._write_failed = False
        self._claim_all(mine)
        if not self._write_failed:
            self._warned.pop("write", None)
        self._collect_garbage(wanted)
        return self.held()

    def release_all(self) -> None:
        """Stop for good: stop serving every cluster, release their Leases, leave the membership.

        Call it from the thread that drives ``step`` (a step running meanwhile could write a
        Lease back), once the clusters' controllers have stopped: the next replica starts on
        its next step. Safe to call more than once; ``step`` does nothing afterwards.
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            clusters = set(self._renewed) | self._releasing
            self._renewed.clear()
        self._releasing = set()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for cluster in sorted(clusters):
            self._release(cluster)
        try:
            self._client.delete(LEASES, self._member_name, self.namespace)
        except NotFound:
            pass
        except ApiError as err:
            log.warning("%s cannot delete its membership Lease: %r", self.identity, err)

    # -- rounds ------------------------------------------------------------------------------

    def _valid(self, clusters: Collection[str]) -> set[str]:
        wanted = set()
        for cluster in clusters:
            if _CLUSTER_KEY.match(cluster):
                wanted.add(cluster)
            else:
                self._warn(
                    f"key {cluster}",
                    f"fleet sharding skips cluster key {cluster!r}: expected namespace/name",
                )
        return wanted

    def _expire_holds(self) -> None:
        now = self._clock.monotonic()
        with self._lock:
            lapsed = [c for c, t in self._renewed.items() if now - t >= self.renew_deadline]
            for cluster in lapsed:
                del self._renewed[cluster]
        for cluster in lapsed:
            log.warning(
                "%s stops serving cluster %s: Lease %s not renewed within %gs",
                self.identity,
                cluster,
                self.lease_of(cluster),
                self.renew_deadline,
            )

    def _read_leases(self) -> bool:
        """List every sharding Lease; False (logged once per change) when the API fails."""
        try:
            listed = self._client.list(LEASES, self.namespace, label_selector=LABEL_SHARD)
        except ApiError as err:
            self._api_failed("list", f"cannot list Leases in {self.namespace}", err)
            return False
        self._warned.pop("list", None)
        now = self._clock.monotonic()
        seen: dict[str, _Seen] = {}
        for body in listed.items:
            name = (body.get("metadata") or {}).get("name")
            if not isinstance(name, str):
                continue
            record = LeaderElectionRecord.from_lease(body)
            before = self._seen.get(name)
            observed = Observation(record, now) if before is None else before.observation
            seen[name] = _Seen(body, observed.then(record, now))
        self._seen = seen
        return True

    def _live(self, seen: _Seen | None) -> str:
        """The holder of a Lease whose record has not expired, else ``""``."""
        if seen is None or not seen.record.holder_identity:
            return ""
        if self._clock.monotonic() >= seen.observation.expires_at(self.lease_duration):
            return ""
        return seen.record.holder_identity

    def _membership(self, wanted: Collection[str]) -> tuple[set[str], dict[str, str]]:
        members = {self.identity}
        for seen in self._seen.values():
            holder = self._live(seen)
            if holder and seen.role == ROLE_MEMBER:
                members.add(holder)
        holders = {}
        for cluster in wanted:
            holder = self._live(self._seen.get(cluster_lease_name(cluster)))
            if holder:
                holders[cluster] = holder
        return members, holders

    def _renew_membership(self) -> None:
        self._write(self._member_name, {LABEL_SHARD: ROLE_MEMBER}, {}, retry=True)

    def _claim_all(self, clusters: Collection[str]) -> None:
        """Take or renew every Lease of ``clusters``, nearest expiry first, side by side.

        One Lease write per held cluster, one after another, made a step as long as the sum of
        their round trips: under load a step of 30 clusters outlasted the renew deadline, and
        the replica fenced clusters it held itself. Up to ``renew_workers`` writes are in
        flight at once instead, the held Leases whose last renewal is oldest first, then the
        new ones. Each write touches only its own Lease's entry (``_seen``, ``_renewed`` under
        the lock), and its own send time still starts its renew deadline: fencing is as exact
        as it was.
        """
        with self._lock:
            renewed = dict(self._renewed)
        ordered = sorted(clusters, key=lambda c: (c not in renewed, renewed.get(c, 0.0), c))
        if self.renew_workers == 1 or len(ordered) <= 1:
            for cluster in ordered:
                self._claim(cluster)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self.renew_workers, thread_name_prefix=f"shard-renew-{self.identity}"
            )
        # Submitted in order, so the pool starts them in order; list() waits for all and
        # raises what a worker raised, as the loop did.
        list(self._pool.map(self._claim, ordered))

    def _claim(self, cluster: str) -> None:
        """Take or renew ``cluster``'s Lease if it is free, expired or ours."""
        name = cluster_lease_name(cluster)
        holder = self._live(self._seen.get(name))
        if holder in ("", self.identity):
            labels = {LABEL_SHARD: ROLE_CLUSTER}
            sent_at = self._write(name, labels, {ANNOTATION_CLUSTER: cluster}, retry=True)
            if sent_at is not None:
                self._hold(cluster, sent_at)
                return
            holder = self._live(self._seen.get(name))  # the winner of a lost race, if any
        if holder not in ("", self.identity):
            self._drop(cluster, f"Lease {self.lease_of(cluster)} is now held by {holder}")

    def _drop(self, cluster: str, why: str) -> None:
        with self._lock:
            held = self._renewed.pop(cluster, None) is not None
        if held:
            log.warning("%s stops serving cluster %s: %s", self.identity, cluster, why)
        else:
            log.debug("%s waits for cluster %s: %s", self.identity, cluster, why)

    def _hold(self, cluster: str, sent_at: float) -> None:
        with self._lock:
            if self._stopped:
                return
            new = cluster not in self._renewed
            self._renewed[cluster] = sent_at
        if new:
            log.info(
                "%s serves cluster %s (Lease %s)", self.identity, cluster, self.lease_of(cluster)
            )

    def _write(
        self, name: str, labels: dict[str, str], annotations: dict[str, str], *, retry: bool
    ) -> float | None:
        """Write ourselves into Lease ``name``; when it was sent, or None if we did not."""
        sent_at = self._clock.monotonic()
        stamp = format_micro_time(self._clock.now())
        before = self._seen.get(name)
        try:
            if before is None:
                record = claim(self.identity, self._seconds, stamp, None)
                body = new_lease(
                    name, self.namespace, record, labels=labels, annotations=annotations
                )
                written = self._client.create(LEASES, body, self.namespace)
            else:
                record = claim(self.identity, self._seconds, stamp, before.record)
                written = self._client.update(LEASES, with_record(before.body, record))
        except Conflict as err:
            # Written since we read it: by a replica that won, or by someone editing its
            # metadata. Read it once more and judge again.
            if not retry or not self._reread(name):
                log.info("%s lost the race for Lease %s: %r", self.identity, name, err)
                return None
            if self._live(self._seen.get(name)) not in ("", self.identity):
                return None
            return self._write(name, labels, annotations, retry=False)
        except ApiError as err:
            # AlreadyExists: another replica created it first; we read it next round.
            level = logging.INFO if isinstance(err, AlreadyExists) else logging.WARNING
            doing = f"cannot write Lease {self.namespace}/{name}"
            self._api_failed("write", doing, err, level)
            self._write_failed = True
            return None
        observed = before.observation if before is not None else Observation(record, sent_at)
        self._seen[name] = _Seen(written, observed.then(record, self._clock.monotonic()))
        return sent_at

    def _reread(self, name: str) -> bool:
        try:
            body = self._client.get(LEASES, name, self.namespace)
        except NotFound:
            self._seen.pop(name, None)
            return True
        except ApiError:
            return False
        record = LeaderElectionRecord.from_lease(body)
        before = self._seen.get(name)
        now = self._clock.monotonic()
        observed = Observation(record, now) if before is None else before.observation
        self._seen[name] = _Seen(body, observed.then(record, now))
        return True

    def _release(self, cluster: str) -> None:
        """Hand ``cluster``'s Lease back if the last record we saw names us."""
        name = cluster_lease_name(cluster)
        seen = self._seen.get(name)
        if seen is None or seen.record.holder_identity != self.identity:
            return
        record = released(seen.record, format_micro_time(self._clock.now()))
        try:
            written = self._client.update(LEASES, with_record(seen.body, record))
        except ApiError as err:
            # The Lease then simply expires; a 409 means someone else already took it.
            log.info("%s cannot release Lease %s: %r", self.identity, name, err)
            return
        now = self._clock.monotonic()
        self._seen[name] = _Seen(written, seen.observation.then(record, now))
        log.info("%s released cluster %s", self.identity, cluster)

    def _collect_garbage(self, wanted: Collection[str]) -> None:
        """Delete expired membership Leases and free Leases of clusters no longer served."""
        names = {cluster_lease_name(c) for c in wanted}
        for name, seen in list(self._seen.items()):
            if name == self._member_name or self._live(seen):
                continue
            if seen.role == ROLE_CLUSTER and name in names:
                continue
            if seen.role not in (ROLE_MEMBER, ROLE_CLUSTER):
                continue
            try:
                self._client.delete(
                    LEASES,
                    name,
                    self.namespace,
                    preconditions=Preconditions(resource_version=seen.resource_version),
                )
            except ApiError as err:
                # Renewed or deleted since we read it: it is someone else's to judge now.
                log.debug("not deleting Lease %s: %r", name, err)
                continue
            del self._seen[name]
            log.info("%s deleted expired Lease %s/%s", self.identity, self.namespace, name)

    def _api_failed(
        self, what: str, doing: str, err: ApiError, level: int = logging.WARNING
    ) -> None:
        """One line per change of the kind of error, however many Leases meet it: an outage or
        a missing permission is said once, not for every cluster and every step."""
        hint = ""
        if isinstance(err, Forbidden):
            hint = (
                "; grant the controller's ServiceAccount get, list, create, update and delete "
                f"on leases (coordination.k8s.io) in namespace {self.namespace}"
            )
        kind = f"{type(err).__name__} {err.code}"
        repeated = self._warned.get(what) == kind
        self._warned[what] = kind
        level = logging.DEBUG if repeated else level
        log.log(level, "%s %s: %r%s", self.identity, doing, err, hint)

    def _warn(self, what: str, message: str, level: int = logging.WARNING) -> None:
        """Log ``message`` at ``level`` once per change, later repeats at DEBUG."""
        repeated = self._warned.get(what) == message
        self._warned[what] = message
        log.log(logging.DEBUG if repeated else level, "%s", message)
