"""Lease-based leader election, so that only one replica of the controller acts at a time.

Two replicas that both launched capacity for the same pending pods would double the bill, and
two that both consolidated could drain the same node twice. Kubernetes controllers solve this
with a ``coordination.k8s.io/v1`` Lease and client-go's ``leaderelection`` package; this module
follows that package's rules so that a Go and a Python replica would agree on who leads:

- The Lease is created if missing. A candidate writes itself in as the holder only when the
  current holder is empty, is itself, or the record has not changed for the lease duration as
  measured on the candidate's *own* monotonic clock from the moment it first saw that record.
  Timestamps written by other replicas are compared, never trusted, so clock skew between
  machines does not matter (only a difference in clock *rate* does).
- Every write carries the resourceVersion read before it: of two candidates racing for an
  expired Lease exactly one wins, the other gets 409 and backs off.
- The leader renews every ``retry_period``. If renewing keeps failing until ``renew_deadline``
  has passed since the last successful renew was sent, or a read shows that someone else holds
  the Lease, it stops leading at once. Because ``renew_deadline < lease_duration``, the old
  leader has stopped before any other candidate can consider the Lease expired.
- ``leaseTransitions`` counts changes of holder; ``acquireTime``/``renewTime`` are written as
  ``MicroTime`` (RFC 3339 with microseconds).
- On a graceful stop the Lease is released (empty holder, ``leaseDurationSeconds: 1``) after
  ``on_stopped_leading`` has returned, so the next replica takes over on its next poll instead
  of waiting out the lease.

One deliberate difference from client-go: a leader whose renewal reveals another holder stops
immediately, where client-go keeps retrying until its renew deadline.

The elector runs the same way as the rest of the runtime: ``step()`` does one round without
blocking longer than one API call and says when it wants to run again (the stepped runtime and
tests, on a ``FakeClock``), and ``run(stop)`` loops on a ``threading.Event`` for real clusters.
"""

from __future__ import annotations

import logging
import math
import random
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Final

from karpenter_capi.core.clock import Clock, format_micro_time
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import ApiError, NotFound
from karpenter_capi.core.kube.leases import (
    LeaderElectionRecord,
    claim,
    lease_seconds,
    new_lease,
    released,
    with_record,
)
from karpenter_capi.core.kube.resources import LEASES

log = logging.getLogger(__name__)

JITTER_FACTOR: Final = 1.2
"""client-go's: a candidate polls every ``retry_period * (1 + rand() * 1.2)``, so that many
candidates do not hit the API server in lockstep."""


def make_identity(hostname: str | None = None) -> str:
    """A candidate identity: the hostname, ``_``, and a random UUID, as client-go users build it.

    The hostname tells a human which pod leads; the random part makes a restarted pod (same
    hostname) a new candidate, so it never mistakes its predecessor's Lease for its own.
    """
    return f"{hostname or socket.gethostname()}_{uuid.uuid4()}"


Callback = Callable[[], None]


class LeaderElector:
    """Campaigns for one Lease and reports whether this replica leads; see the module docstring.

    Drive it from one thread only, with ``step()`` or ``run(stop)``; ``is_leader`` and
    ``leader_identity`` may be read, and ``shutdown()`` called, from any thread. The callbacks
    run on the driving thread (or the one calling ``shutdown()``), outside any lock, and must
    return quickly: renewals wait for them. ``on_started_leading`` should start the work,
    ``on_stopped_leading`` should stop it and return only once it has stopped. They come in
    pairs, and may come again: a replica that lost the Lease stays a candidate and can win it
    back.
    """

    def __init__(
        self,
        client: KubeClient,
        clock: Clock,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = None,
        release_on_stop: bool = True,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if not name or not namespace:
            raise ValueError("leader election needs a Lease name and namespace")
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        if retry_period <= 0:
            raise ValueError("retry_period must be greater than zero")
        if lease_duration <= renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if renew_deadline <= JITTER_FACTOR * retry_period:
            raise ValueError(f"renew_deadline must be greater than retry_period * {JITTER_FACTOR}")
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.release_on_stop = release_on_stop
        self._client = client
        self._clock = clock
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._rand = rand
        self._lease_seconds = lease_seconds(lease_duration)
        self._lock = threading.Lock()
        self._leading = False
        self._stopped = False
        self._renewed_at = -math.inf  # monotonic time the last successful write was sent
        self._lease: JsonObject | None = None  # as last read or written: its resourceVersion
        self._observed: LeaderElectionRecord | None = None
        self._read_error = ""  # the failed read last logged at WARNING (once per change)
        self._observed_at = -math.inf  # monotonic time _observed was first seen
        self._reported_leader: str | None = None

    # -- reads (any thread) ------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this replica leads *now*.

        Also false once ``renew_deadline`` has passed since the last successful renew, even if
        the driving thread is stuck in a slow API call and has not yet noticed: a replica that
        may have lost its Lease must not act.
        """
        with self._lock:
            return self._leading and (
                self._clock.monotonic() - self._renewed_at < self.renew_deadline
            )

    @property
    def leader_identity(self) -> str | None:
        """The holder in the last Lease record seen or written (``None``: none seen, or none)."""
        with self._lock:
            if self._observed is None:
                return None
            return self._observed.holder_identity or None

    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"

    # -- drivers -----------------------------------------------------------------------------

    def step(self) -> float:
        """One round: acquire, or renew, as due. Returns the seconds until it wants to run again.

        After ``shutdown()`` it does nothing and returns ``math.inf``.
        """
        if self._stopped:
            return math.inf
        if self._leading:
            return self._step_leading()
        return self._step_candidate()

    def run(self, stop: threading.Event) -> None:
        """Campaign and lead until ``stop`` is set, then ``shutdown()``. Blocks; real clocks only.

        Waits are real time (``stop.wait``); with a ``FakeClock`` use ``step()``.
        """
        try:
            while not stop.is_set():
                try:
                    delay = self.step()
                except Exception:
                    # A bug or an unexpected answer must not end the campaign: the renew
                    # deadline still applies on the next round.
                    log.exception("leader election round for %s failed", self.describe())
                    delay = self.retry_period
                if math.isinf(delay):  # shut down from another thread
                    break
                stop.wait(delay)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Stop for good: stop leading (callback) and then, if ``release_on_stop``, release.

        The release comes after ``on_stopped_leading`` returns, so the next leader never starts
        while this one is still acting. Safe to call more than once.
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            was_leading = self._leading
            self._leading = False
        if was_leading:
            log.info("%s stops leading %s: shutting down", self.identity, self.describe())
            self._call(self._on_stopped, "on_stopped_leading")
        if self.release_on_stop:
            self._release()

    # -- rounds ------------------------------------------------------------------------------

    def _step_candidate(self) -> float:
        if self._try_acquire_or_renew():
            with self._lock:
                # shutdown() from another thread during the write: do not start after all.
                stopped = self._stopped
                self._leading = not stopped
            if stopped:
                if self.release_on_stop:
                    self._release()
                return math.inf
            log.info("%s acquired lease %s", self.identity, self.describe())
            self._call(self._on_started, "on_started_leading")
            return self.retry_period
        delay = self.retry_period * (1.0 + self._rand() * JITTER_FACTOR)
        # Wake exactly when the holder's lease runs out rather than up to a period later: the
        # stepped runtime can then hand over at the earliest safe moment.
        expires_in = self._observed_expiry() - self._clock.monotonic()
        return min(delay, expires_in) if expires_in > 0 else delay

    def _step_leading(self) -> float:
        if self._deadline_passed():
            self._stop_leading("failed to renew within the renew deadline")
            return self.retry_period
        if self._try_acquire_or_renew():
            return self.retry_period
        observed = self._observed
        if observed is not None and observed.holder_identity not in ("", self.identity):
            self._stop_leading(f"lease is now held by {observed.holder_identity}")
            return self.retry_period
        if self._deadline_passed():
            self._stop_leading("failed to renew within the renew deadline")
            return self.retry_period
        left = self.renew_deadline - (self._clock.monotonic() - self._renewed_at)
        return min(self.retry_period, left)

    def _deadline_passed(self) -> bool:
        return self._clock.monotonic() - self._renewed_at >= self.renew_deadline

    def _stop_leading(self, why: str) -> None:
        with self._lock:
            was_leading, self._leading = self._leading, False
        if not was_leading:  # a concurrent shutdown() already said so
            return
        log.warning("%s stops leading %s: %s", self.identity, self.describe(), why)
        self._call(self._on_stopped, "on_stopped_leading")

    def _call(self, callback: Callback | None, what: str) -> None:
        if callback is None:
            return
        try:
            callback()
        except Exception:
            log.exception("leader election %s callback failed", what)

    # -- the protocol ------------------------------------------------------------------------

    def _observed_expiry(self) -> float:
        """Monotonic time at which the observed record, if unchanged, may be taken over."""
        if self._observed is None:
            return -math.inf
        seconds = self._observed.lease_duration_seconds
        if seconds is None or seconds <= 0:
            seconds = self._lease_seconds
        return self._observed_at + seconds

    def _observe(self, record: LeaderElectionRecord) -> None:
        """Remember ``record``; restart the expiry clock only if it differs from the last one."""
        now = self._clock.monotonic()
        with self._lock:
            if record != self._observed:
                self._observed = record
                self._observed_at = now
        if record.holder_identity != self._reported_leader:
            self._reported_leader = record.holder_identity
            if record.holder_identity and record.holder_identity != self.identity:
                log.info("lease %s is held by %s", self.describe(), record.holder_identity)

    def _written(self, lease: JsonObject, record: LeaderElectionRecord, sent_at: float) -> None:
        self._lease = lease
        self._observe(record)
        with self._lock:
            self._renewed_at = sent_at

    def _try_acquire_or_renew(self) -> bool:
        """client-go's ``tryAcquireOrRenew``: True if we hold the Lease after this call."""
        sent_at = self._clock.monotonic()
        stamp = format_micro_time(self._clock.now())
        observed = self._observed

        # Fast path: the leader writes over the Lease it last wrote, without reading first.
        if (
            self._leading
            and self._lease is not None
            and observed is not None
            and sent_at < self._observed_expiry()
        ):
            renewal = claim(self.identity, self._lease_seconds, stamp, observed)
            try:
                lease = self._update(self._lease, renewal)
            except ApiError as err:
                log.debug("optimistic renew of %s failed (%r); re-reading", self.describe(), err)
            else:
                self._written(lease, renewal, sent_at)
                return True

        try:
            lease = self._client.get(LEASES, self.name, self.namespace)
        except NotFound:
            return self._create(claim(self.identity, self._lease_seconds, stamp, None), sent_at)
        except ApiError as err:
            # Every retry period meets the same outage again: once per change at WARNING.
            level = logging.DEBUG if repr(err) == self._read_error else logging.WARNING
            self._read_error = repr(err)
            log.log(level, "cannot read lease %s: %r", self.describe(), err)
            return False
        self._read_error = ""
        self._lease = lease
        current = LeaderElectionRecord.from_lease(lease)
        self._observe(current)
        holder = current.holder_identity
        if holder and holder != self.identity and self._clock.monotonic() < self._observed_expiry():
            return False

        record = claim(self.identity, self._lease_seconds, stamp, current)
        try:
            written = self._update(lease, record)
        except ApiError as err:
            # 409: another candidate wrote first. Anything else: try again next round.
            log.info("cannot write lease %s: %r", self.describe(), err)
            return False
        self._written(written, record, sent_at)
        return True

    def _create(self, record: LeaderElectionRecord, sent_at: float) -> bool:
        lease = new_lease(self.name, self.namespace, record)
        try:
            created = self._client.create(LEASES, lease, self.namespace)
        except ApiError as err:
            # AlreadyExists: another candidate created it first; read it next round.
            log.info("cannot create lease %s: %r", self.describe(), err)
            return False
        self._written(created, record, sent_at)
        return True

    def _update(self, lease: JsonObject, record: LeaderElectionRecord) -> JsonObject:
        """PUT ``record`` into ``lease``, conditional on the resourceVersion it was read at."""
        return self._client.update(LEASES, with_record(lease, record))

    def _release(self) -> bool:
        """Hand the Lease back if the last record we saw names us (client-go's ``release``)."""
        lease, observed = self._lease, self._observed
        if lease is None or observed is None or observed.holder_identity != self.identity:
            return True
        stamp = format_micro_time(self._clock.now())
        record = released(observed, stamp)
        try:
            written = self._update(lease, record)
        except ApiError as err:
            # The Lease then simply expires; a 409 means someone else already took it.
            log.warning("cannot release lease %s: %r", self.describe(), err)
            return False
        self._lease = written
        self._observe(record)
        log.info("%s released lease %s", self.identity, self.describe())
        return True
