"""One fixed set of worker threads shared by many ``ThreadedDriver``s, fair across clusters.

In fleet mode one process serves up to ~100 workload clusters, each with its own ``Manager``
and ``ThreadedDriver``. Unpooled, every driver starts threads per controller worker and per
periodic controller: some sixty a cluster, thousands for a fleet, and a busy cluster competes
with a quiet one only through the OS scheduler. A ``WorkerPool`` bounds the threads and decides
who goes next:

* round-robin across clusters (members), then across that cluster's controllers, so a cluster
  with a 10,000-key backlog gets one turn in N like any other;
* a cap on each cluster's reconciles in flight (``per_cluster``, a quarter of the workers by
  default), so a cluster whose reconciles are slow (a 429 storm, an unreachable API server)
  cannot hold every worker: another cluster's key waits at most for one reconcile per worker
  to end; and a cluster's second (third...) reconcile runs only while another worker stays
  free, so even several slow clusters leave a worker for the others, short of one per worker;
* a latency-sensitive controller (``latency_sensitive = True``: provisioning, whose look turns
  pending pods into a scale-up decision) whose due run is a decision takes the next free
  worker ahead of every other cluster's queued work (status writes, launch checks can wait a
  moment; a pod waiting for a node cannot), within the same per-cluster caps: the urgent
  lane. Which runs are decisions is the controller's to say (``urgent_run()``, asked when
  the run is marked due and again at each wake-up while it waits, so a recheck waiting its
  turn moves up when a new pod makes it a decision; without it, every run is one). The
  provisioner says so of a window holding a pod no round has seen: its looks that find
  nothing, its rechecks and relooks of pods already placed go in turn with other work;
* ``urgent_workers`` more threads take only those decisions, so a decision never waits for
  a worker to come back from another cluster's reconcile: at a fleet's burst every shared
  worker is busy, most of them waiting on an API server, and a window that closed then waited
  for the first of them to finish (issue 28's 100-cluster wave: the shared workers were busy
  7.4 of 8 on average);
* given a ``RunGate`` (``gate.py``), a shared worker's run executes Python only while few
  others do (a worker waiting on an API server does not count, decisions never wait): the
  workers' isolation without their contention for the one interpreter;
* each controller keeps its own concurrency (its driver's ``workers`` for it) and its queue's
  guarantees (a key is never reconciled twice at once, per-key backoff);
* one heap of due times stands in for every per-queue and per-periodic-controller timer:
  delayed keys (``add_after``, backoff), periodic runs, and re-checks of a cluster that is not
  leading or a controller whose caches have not synced yet.

Workers never block inside a queue: a queue tells the pool when it has work
(``QueueListener``) and a worker takes from it with ``get(block=False)``. The heap is in real
seconds, converted from each manager's clock when a time is scheduled: made for the
``SystemClock``. A clock that stands still (a ``FakeClock``) is re-checked every ``_RECHECK``
seconds at most while its timers are pending; fake clocks belong with the stepped driver.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.runtime.controller import Key
from karpenter_capi.core.runtime.entries import ControllerEntry, Entry, PeriodicEntry
from karpenter_capi.core.runtime.gate import RunGate

_log = logging.getLogger(__name__)

DEFAULT_POOL_WORKERS = 8
DEFAULT_URGENT_WORKERS = 2
"""Fleet mode's workers for provisioning decisions alone (``urgent_workers``)."""
_SYNC_POLL = 0.1
"""How often a controller whose caches have not synced is looked at again."""
_RECHECK = 0.01
"""The soonest a timer that fired for nothing is looked at again (a clock that stands still)."""
_EPSILON = 0.001
"""Added to every converted due time, so a timer never fires a hair before its clock says so."""
_LONGEST_WAIT = 3600.0


@dataclass(eq=False)
class PoolMember:
    """What a driver hands the pool: its controllers and how to run one step of each.

    ``entries`` pairs every controller with the reconciles of it that may run at once.
    ``reconcile`` gets a key already taken from the entry's queue and must settle it (``done``);
    ``run_periodic`` runs a due periodic controller; both are the driver's, so its leadership
    gate and in-flight accounting hold. ``stop`` is called on a pool thread after
    ``request_stop``.
    """

    name: str
    clock: Clock
    entries: Sequence[tuple[Entry, int]]
    leading: Callable[[], bool]
    reconcile: Callable[[ControllerEntry, Key], None]
    run_periodic: Callable[[PeriodicEntry], None]
    stop: Callable[[], object] = lambda: None


@dataclass(eq=False)
class _Slot:
    """One controller of one member: its pool-side state (all under the pool's lock)."""

    pool: WorkerPool
    member: Membership
    entry: Entry
    limit: int
    in_flight: int = 0
    pending: bool = False
    timer_at: float | None = None
    sensitive: bool = False
    """The controller is latency-sensitive (``latency_sensitive``)."""
    asks: Callable[[], bool] | None = None
    """Its ``urgent_run``: whether the run now due is a decision (``None``: every run is)."""
    urgent: bool = False
    """Pending in the urgent lane: picked before any other cluster's work."""

    # QueueListener, called with the queue's lock held.
    def on_ready(self) -> None:
        self.pool._mark_pending(self)

    def on_scheduled(self, ready_at: float) -> None:
        self.pool._schedule(self, ready_at)


@dataclass(eq=False)
class Membership:
    """A driver's place in a pool, from ``WorkerPool.join`` until ``leave``."""

    pool: WorkerPool
    spec: PoolMember
    slots: list[_Slot] = field(default_factory=list)
    pending: deque[_Slot] = field(default_factory=deque)
    in_flight: int = 0
    active: bool = True
    stop_requested: bool = False
    ready: bool = False
    """Has an entry in the pool's turn of members with pending slots (``_ready``)."""
    turn: int = 0
    """When it was last looked at for work: the lower, the sooner its next turn."""

    def wake(self) -> None:
        """Look at every controller again now (leadership was gained)."""
        self.pool._wake_member(self)

    def request_stop(self) -> None:
        """Have ``spec.stop`` called on a pool thread (safe from a signal handler)."""
        self.stop_requested = True
        self.pool._stop_requests.set()

    def leave(self, timeout: float | None = None) -> bool:
        """Take no more work for this member; True once its reconciles in flight have ended."""
        return self.pool._leave(self, timeout)

    @property
    def reconciles_in_flight(self) -> int:
        with self.pool._cond:
            return self.in_flight


class WorkerPool:
    """``workers`` threads serving every joined driver's queues and periodic controllers.

    ``per_cluster`` caps one member's reconciles and periodic runs in flight (default: a quarter
    of the workers, at least one), and a member with one in flight gets another only if a worker
    stays free after it (so one cluster alone uses at most ``workers - 1``). Threads start
    with ``start`` (or the first ``join``) and end with ``close``; drivers ``join`` as they
    start and ``leave`` as they stop.
    """

    def __init__(
        self,
        workers: int = DEFAULT_POOL_WORKERS,
        *,
        per_cluster: int | None = None,
        urgent_workers: int = 0,
        poll_interval: float = 1.0,
        name: str = "pool",
        gate: RunGate | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("a worker pool needs at least one worker")
        if urgent_workers < 0:
            raise ValueError("urgent_workers cannot be negative")
        cap = max(1, workers // 4) if per_cluster is None else per_cluster
        if cap < 1:
            raise ValueError("per_cluster must be at least one")
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        self.workers = workers
        self.urgent_workers = urgent_workers
        self.per_cluster = cap
        self._poll_interval = poll_interval
        self._name = name
        self.gate = gate
        """Admits a shared worker's run only while few others run Python (``gate.py``)."""
        lock = threading.Lock()
        # Workers wait on ``_cond`` and are woken one by one (``notify``); a driver leaving
        # waits on ``_idle`` for its reconciles in flight, so no wake-up meant for a worker
        # is spent on it.
        self._cond = threading.Condition(lock)
        self._idle = threading.Condition(lock)
        # The urgent-only workers wait on their own condition: a wake-up for other work spent
        # on one of them would leave that work waiting.
        self._urgent_cond = threading.Condition(lock)
        self._members: deque[Membership] = deque()
        # The members with pending slots, by turn (a heap): a worker looks only at these, so
        # a pick costs the same beside a hundred quiet clusters as beside none (it scanned
        # every member). A member looked at takes a new turn, the last: clusters in turn.
        self._ready: list[tuple[int, Membership]] = []
        self._turns = itertools.count()
        self._slots = 0  # every member's slots: the timer heap's live entries at most
        self._timers: list[tuple[float, int, _Slot]] = []
        self._seq = itertools.count()
        self._threads: list[threading.Thread] = []
        self._busy = 0
        """Shared workers running a step (the urgent-only ones are not counted)."""
        self._urgent_pending = 0
        """Pending slots of latency-sensitive controllers (skips their scan when none)."""
        # The member whose step this thread is running, if it is a worker: a driver stopped
        # from inside its own reconcile must not wait for that reconcile to end.
        self._serving = threading.local()
        self._started = False
        self._closed = False
        self._stop_requests = threading.Event()

    # Lifecycle.

    def start(self) -> WorkerPool:
        with self._cond:
            if self._closed:
                raise RuntimeError("this worker pool is closed")
            if self._started:
                return self
            self._started = True
            for index in range(self.workers):
                self._threads.append(_spawn(f"{self._name}-worker-{index}", self._work))
            for index in range(self.urgent_workers):
                name = f"{self._name}-urgent-{index}"
                self._threads.append(_spawn(name, lambda: self._work(urgent_only=True)))
            self._threads.append(_spawn(f"{self._name}-stopper", self._stop_on_request))
        return self

    def close(self, timeout: float | None = 30.0) -> bool:
        """End the pool's threads once their current step is done; True if all ended."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._urgent_cond.notify_all()
        self._stop_requests.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    def __enter__(self) -> WorkerPool:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def members(self) -> list[str]:
        """The registered drivers' names, sorted (the round-robin order rotates as work is
        taken, so it says nothing a caller can rely on)."""
        with self._cond:
            return sorted(member.spec.name for member in self._members)

    @property
    def timers(self) -> int:
        """Due times on the heap, live or superseded (bounded by the number of controllers)."""
        with self._cond:
            return len(self._timers)

    def join(self, spec: PoolMember) -> Membership:
        """Serve ``spec``'s controllers from now on."""
        self.start()
        member = Membership(self, spec)
        for entry, limit in spec.entries:
            if limit < 1:
                raise ValueError(f"{spec.name}/{entry.name}: a controller needs a limit >= 1")
            sensitive = getattr(entry.controller, "latency_sensitive", False) is True
            asks = getattr(entry.controller, "urgent_run", None)
            slot = _Slot(self, member, entry, limit, sensitive=sensitive)
            slot.asks = asks if sensitive and callable(asks) else None
            member.slots.append(slot)
            if isinstance(entry, ControllerEntry):
                entry.queue.set_listener(slot)
            else:
                entry.wake = lambda at, slot=slot: self._wake_periodic(slot, at)
        with self._cond:
            if self._closed:
                raise RuntimeError("this worker pool is closed")
            self._members.append(member)
            self._slots += len(member.slots)
            member.turn = next(self._turns)
            # Keys queued before the listener was set, and every periodic's first run.
            for slot in member.slots:
                self._mark_pending_locked(slot)
            self._cond.notify_all()
        return member

    # What listeners, drivers and members call.

    def _mark_pending(self, slot: _Slot) -> None:
        with self._cond:
            self._mark_pending_locked(slot)
            self._cond.notify()

    def _mark_pending_locked(self, slot: _Slot) -> None:
        member = slot.member
        if not member.active:
            return
        if slot.pending:
            self._relane_locked(slot)
            return
        slot.pending = True
        member.pending.append(slot)
        slot.urgent = False
        self._relane_locked(slot)
        if not member.ready:
            member.ready = True
            heapq.heappush(self._ready, (member.turn, member))

    def _relane_locked(self, slot: _Slot) -> None:
        """Move a pending slot to the urgent lane if its run now due is a decision (asked
        again each time it is marked: a new pod may come while a recheck waits its turn)."""
        if slot.urgent or not slot.pending or not slot.sensitive:
            return
        if slot.asks is not None:
            try:
                if not slot.asks():
                    return
            except Exception:
                _log.exception("%s/%s: urgent_run raised", slot.member.spec.name, slot.entry.name)
        slot.urgent = True
        self._urgent_pending += 1
        self._urgent_cond.notify()

    def _schedule(self, slot: _Slot, at: float, floor: float = 0.0) -> None:
        """Look at ``slot`` again at ``at`` on its member's clock (``floor`` seconds at least)."""
        delay = max(floor, at - slot.member.spec.clock.monotonic())
        self._schedule_in(slot, delay)

    def _schedule_in(self, slot: _Slot, delay: float) -> None:
        due = time.monotonic() + max(0.0, delay) + _EPSILON
        with self._cond:
            if not slot.member.active or (slot.timer_at is not None and slot.timer_at <= due):
                return
            slot.timer_at = due
            first = not self._timers or due < self._timers[0][0]
            heapq.heappush(self._timers, (due, next(self._seq), slot))
            self._compact_timers_locked()
            if first:
                # A waiting worker may have planned to sleep past this (an urgent-only one
                # fires it when every shared worker is busy).
                self._cond.notify()
                self._urgent_cond.notify()

    def _compact_timers_locked(self) -> None:
        # A timer superseded by an earlier one stays in the heap until it comes up; a queue
        # whose keys keep getting sooner times (hours-away expiries) would grow it without
        # bound, so once stale entries dominate the heap is rebuilt from the live ones.
        if len(self._timers) <= 4 * self._slots + 64:
            return
        self._timers = [
            (slot.timer_at, next(self._seq), slot)
            for member in self._members
            for slot in member.slots
            if slot.timer_at is not None
        ]
        heapq.heapify(self._timers)

    def _wake_periodic(self, slot: _Slot, at: float) -> None:
        entry = slot.entry
        assert isinstance(entry, PeriodicEntry)
        if entry.ask(at):
            self._schedule(slot, at)
        elif slot.asks is not None and slot.pending and not slot.urgent and slot.asks():
            # Due already and waiting in the ordinary lane, and the event made its run a
            # decision. Checked before taking the pool's lock: this runs on the informer's
            # thread for every pending pod's event, and taking the lock for each held a
            # burst's later pods behind every worker's pick (docs/runtime.md). A race is
            # harmless: a slot marked pending meanwhile is asked then, and
            # ``_relane_locked`` checks again under the lock.
            with self._cond:
                self._relane_locked(slot)

    def _wake_member(self, member: Membership) -> None:
        with self._cond:
            for slot in member.slots:
                self._mark_pending_locked(slot)
            self._cond.notify_all()

    def _leave(self, member: Membership, timeout: float | None) -> bool:
        with self._cond:
            if member.active:
                member.active = False
                self._members.remove(member)
                self._slots -= len(member.slots)
                member.ready = False  # its entry in ``_ready`` is dropped when it comes up
                member.pending.clear()
                for slot in member.slots:
                    self._urgent_pending -= slot.urgent and slot.pending
                    slot.pending = slot.urgent = False
                    slot.timer_at = None
                self._cond.notify_all()
            own = 1 if getattr(self._serving, "member", None) is member else 0
            finished = self._idle.wait_for(lambda: member.in_flight <= own, timeout)
        for slot in member.slots:
            if isinstance(slot.entry, ControllerEntry):
                slot.entry.queue.set_listener(None)
            else:
                slot.entry.wake = None
        return finished

    # Workers.

    def _work(self, urgent_only: bool = False) -> None:
        while True:
            with self._cond:
                slot = self._next_locked(urgent_only)
                if slot is None:
                    return
            self._serving.member = slot.member
            gate = self.gate
            if gate is not None:
                gate.enter(urgent=urgent_only or self._serving.urgent)
            try:
                self._serve(slot)
            except Exception:
                _log.exception(
                    "%s/%s: a pooled step raised", slot.member.spec.name, slot.entry.name
                )
            finally:
                if gate is not None:
                    gate.leave()
                self._serving.member = None
                with self._cond:
                    slot.in_flight -= 1
                    slot.member.in_flight -= 1
                    self._busy -= not urgent_only
                    # The slot or its member may have been at its cap.
                    self._cond.notify()
                    if self._urgent_pending:
                        self._urgent_cond.notify()
                    if not slot.member.active:
                        self._idle.notify_all()

    def _next_locked(self, urgent_only: bool) -> _Slot | None:
        """Block until a slot may run and reserve it; ``None`` once the pool closes. An
        urgent-only worker takes latency-sensitive slots alone."""
        while not self._closed:
            self._fire_timers_locked()
            if urgent_only:
                slot = self._pick_urgent_locked(shared=False) if self._urgent_pending else None
            else:
                slot = self._pick_locked()
            if slot is not None:
                return slot
            wait = _LONGEST_WAIT
            if self._timers:
                wait = min(wait, max(0.0, self._timers[0][0] - time.monotonic()))
            (self._urgent_cond if urgent_only else self._cond).wait(wait)
        return None

    def _fire_timers_locked(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            due, _, slot = heapq.heappop(self._timers)
            if slot.timer_at != due:
                continue  # superseded by an earlier timer, or the member left
            slot.timer_at = None
            self._mark_pending_locked(slot)
            # This thread takes one; the others are for whoever else is waiting.
            self._cond.notify()

    def _pick_locked(self) -> _Slot | None:
        if self._urgent_pending:
            urgent = self._pick_urgent_locked(shared=True)
            if urgent is not None:
                return urgent
        # Clusters with work in turn, each one looked at moving to the back; one found with
        # nothing pending leaves the turn until a slot of it is marked pending again.
        for _ in range(len(self._ready)):
            turn, member = heapq.heappop(self._ready)
            if not member.ready or turn != member.turn:
                continue  # left the pool, or taken out of turn by an urgent pick
            if not member.pending:
                member.ready = False
                continue
            member.turn = next(self._turns)
            heapq.heappush(self._ready, (member.turn, member))
            if not self._may_run_locked(member):
                continue
            # Then that cluster's controllers in turn: a slot taken goes to the back when it
            # is marked pending again.
            for _ in range(len(member.pending)):
                slot = member.pending.popleft()
                if slot.in_flight < slot.limit:
                    return self._take_locked(slot)
                member.pending.append(slot)
        return None

    def _pick_urgent_locked(self, shared: bool) -> _Slot | None:
        """A due latency-sensitive slot, clusters in turn (the one served goes to the back),
        for a shared worker or (not ``shared``) an urgent-only one."""
        for turn, member in sorted(self._ready, key=lambda entry: entry[0]):
            if not member.ready or turn != member.turn or not self._may_run_locked(member, shared):
                continue
            for slot in member.pending:
                if slot.urgent and slot.in_flight < slot.limit:
                    member.pending.remove(slot)
                    # To the back of the turn; its old entry is dropped when it comes up.
                    member.turn = next(self._turns)
                    heapq.heappush(self._ready, (member.turn, member))
                    return self._take_locked(slot, shared)
        return None

    def _may_run_locked(self, member: Membership, shared: bool = True) -> bool:
        if member.in_flight >= self.per_cluster or not member.pending:
            return False
        # A cluster's second reconcile must leave a shared worker free, so that clusters
        # stuck together cannot hold every worker as long as one has nothing running (an
        # urgent-only worker takes nothing from the others).
        return not (shared and member.in_flight and self._busy + 1 >= self.workers)

    def _take_locked(self, slot: _Slot, shared: bool = True) -> _Slot:
        self._serving.urgent = slot.urgent  # on the worker's thread: for the gate
        slot.pending = False
        self._urgent_pending -= slot.urgent
        slot.urgent = False
        slot.in_flight += 1
        slot.member.in_flight += 1
        self._busy += shared
        return slot

    def _serve(self, slot: _Slot) -> None:
        member, entry = slot.member, slot.entry
        spec = member.spec
        if not member.active:
            return
        if not spec.leading():
            # Looked at again on a poll, or at once by ``wake`` when leadership is gained.
            self._schedule_in(slot, self._poll_interval)
            return
        if not entry.synced():
            self._schedule_in(slot, _SYNC_POLL)
            return
        if isinstance(entry, ControllerEntry):
            key = entry.queue.get(block=False)
            if key is None:
                # A timer that fired for a key not yet due, or a key another worker took.
                at = entry.queue.next_ready_time()
                if at is not None:
                    self._schedule(slot, at, floor=_RECHECK)
                return
            # There may be more keys: another worker may take one while this one reconciles.
            self._mark_pending(slot)
            spec.reconcile(entry, key)
            return
        ran = entry.due(spec.clock.monotonic())
        if ran:
            spec.run_periodic(entry)
        if entry.next_run is None:
            self._schedule_in(slot, self._poll_interval)
        else:
            self._schedule(slot, entry.next_run, floor=0.0 if ran else _RECHECK)

    def _stop_on_request(self) -> None:
        while True:
            self._stop_requests.wait()
            self._stop_requests.clear()
            with self._cond:
                if self._closed:
                    return
                asked = [m for m in self._members if m.stop_requested]
            for member in asked:
                try:
                    member.spec.stop()
                except Exception:
                    _log.exception("%s: stopping on request raised", member.spec.name)


def _spawn(name: str, target: Callable[[], None]) -> threading.Thread:
    # Daemon threads, so that a reconcile that never returns cannot keep the process alive.
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


__all__ = [
    "DEFAULT_POOL_WORKERS",
    "DEFAULT_URGENT_WORKERS",
    "Membership",
    "PoolMember",
    "WorkerPool",
]
