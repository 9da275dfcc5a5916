"""The controller work queue: deduplicating, rate-limited, with delayed adds.

Informer handlers only enqueue keys; workers reconcile them. The queue gives the guarantees
client-go's workqueue gives and controllers rely on:

* a key added many times before a worker picks it up is reconciled once (events coalesce);
* a key is never handed to two workers at once: if it is re-added while being processed it
  is queued again only when that worker calls ``done``;
* failures retry with per-key exponential backoff (5ms doubling to 1000s) combined with an
  overall token bucket (10 qps, burst 100) so a broken cluster cannot turn into a hot loop;
* ``add_after`` schedules a key for later (requeue after N seconds).

All timing comes from an injected ``Clock``. Threaded workers block in ``get``; the stepped
simulation runtime calls ``pop_ready`` and advances its virtual clock to ``next_ready_time``.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Final, Generic, Protocol, TypeVar

from karpenter_capi.core.clock import Clock

K = TypeVar("K", bound=Hashable)


_LONGEST_WAIT_SECONDS: Final = 3600.0


class RateLimiter(Protocol):
    """Decides how long an item waits before its next retry."""

    def when(self, item: Hashable) -> float:
        """Record one more retry of ``item`` and return the seconds it must wait."""
        ...

    def forget(self, item: Hashable) -> None:
        """Stop tracking ``item`` (it succeeded): its next failure starts from the base delay."""
        ...

    def num_requeues(self, item: Hashable) -> int: ...


class ItemExponentialFailureRateLimiter:
    """``base * 2**failures`` per item, capped at ``max_delay``."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self._base = base_delay
        self._max = max_delay
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        exponent = self._failures.get(item, 0)
        self._failures[item] = exponent + 1
        # Cap the exponent before computing: 2**1100 overflows a float.
        if exponent > 1023:
            return self._max
        return min(self._max, self._base * 2.0**exponent)

    def forget(self, item: Hashable) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        return self._failures.get(item, 0)


class BucketRateLimiter:
    """An overall token bucket (``qps`` refill, ``burst`` size) shared by all items.

    Each retry reserves a token; when the bucket is empty the reservation is still granted, in
    the future, like ``golang.org/x/time/rate.Limiter.Reserve``: retries spread out at ``qps``.
    """

    def __init__(self, clock: Clock, qps: float = 10.0, burst: int = 100) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("a token bucket needs qps > 0 and burst >= 1")
        self._clock = clock
        self._qps = qps
        self._burst = float(burst)
        self._tokens = float(burst)
        self._last = clock.monotonic()

    def when(self, item: Hashable) -> float:
        now = self._clock.monotonic()
        elapsed = max(0.0, now - self._last)
        self._tokens = min(self._burst, self._tokens + elapsed * self._qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self._qps

    def forget(self, item: Hashable) -> None:
        return None

    def num_requeues(self, item: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest delay any of the limiters asks for."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self._limiters = limiters

    def when(self, item: Hashable) -> float:
        return max(limiter.when(item) for limiter in self._limiters)

    def forget(self, item: Hashable) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return max(limiter.num_requeues(item) for limiter in self._limiters)


def default_controller_rate_limiter(clock: Clock) -> RateLimiter:
    """client-go's ``DefaultControllerRateLimiter``: per item 5ms..1000s, overall 10 qps/100."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.005, 1000.0),
        BucketRateLimiter(clock, qps=10.0, burst=100),
    )


@dataclass(frozen=True, slots=True)
class QueueHooks:
    """Optional metric callbacks; the metrics layer plugs Prometheus collectors in here."""

    on_add: Callable[[Hashable], None] | None = None
    on_retry: Callable[[Hashable], None] | None = None
    on_depth: Callable[[int], None] | None = None
    on_queue_latency: Callable[[float], None] | None = None
    """Seconds a key waited between being queued and a worker taking it."""
    on_work_duration: Callable[[float], None] | None = None
    """Seconds between ``get`` and ``done`` of a key."""


class QueueListener(Protocol):
    """Told when a queue may have work, so one pool of threads can serve many queues.

    Called with the queue's lock held: a listener records the fact and wakes a thread, and
    must not call back into the queue.
    """

    def on_ready(self) -> None:
        """A key became ready to be taken."""
        ...

    def on_scheduled(self, ready_at: float) -> None:
        """A key will become ready at clock-monotonic ``ready_at`` (``add_after``)."""
        ...


class WorkQueue(Generic[K]):
    """A deduplicating, rate-limited, delaying FIFO of keys."""

    def __init__(
        self,
        clock: Clock,
        *,
        rate_limiter: RateLimiter | None = None,
        name: str = "",
        hooks: QueueHooks | None = None,
    ) -> None:
        self.name = name
        self._clock = clock
        self._rate_limiter = rate_limiter or default_controller_rate_limiter(clock)
        self._hooks = hooks or QueueHooks()
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._queued_at: dict[K, float] = {}
        self._started_at: dict[K, float] = {}
        # Delayed items: heap of (ready_at, seq, item); ``_waiting`` holds each item's live seq
        # so a rescheduled item's older heap entry is recognised as stale and skipped.
        self._heap: list[tuple[float, int, K]] = []
        self._waiting: dict[K, tuple[float, int]] = {}
        self._seq = itertools.count()
        self._shutting_down = False
        self._listener: QueueListener | None = None
        self.adds_total = 0
        self.retries_total = 0

    # Adding.

    def add(self, item: K) -> None:
        """Queue ``item`` unless it is already queued; if it is being processed, after ``done``."""
        with self._cond:
            self._add_locked(item)

    def add_after(self, item: K, delay: float) -> None:
        """Queue ``item`` in ``delay`` seconds (clock time). An earlier pending time wins."""
        with self._cond:
            if self._shutting_down:
                return
            if delay <= 0:
                self._add_locked(item)
                return
            ready_at = self._clock.monotonic() + delay
            current = self._waiting.get(item)
            if current is not None and current[0] <= ready_at:
                return
            seq = next(self._seq)
            self._waiting[item] = (ready_at, seq)
            heapq.heappush(self._heap, (ready_at, seq, item))
            if current is not None:
                self._compact_timers_locked()
            if self._listener is not None:
                self._listener.on_scheduled(ready_at)
            # A blocked ``get`` may need to wake earlier than it planned to.
            self._cond.notify_all()

    def cancel_later(self, item: K) -> None:
        """Drop ``item``'s pending ``add_after``, if any (a key queued now stays queued).

        For a key whose object is gone: a timer for it (an expiry hours away) would otherwise
        be held until it fires, one per object ever seen, for nothing.
        """
        with self._cond:
            if self._waiting.pop(item, None) is not None:
                self._compact_timers_locked()

    def add_rate_limited(self, item: K, at_least: float = 0.0, *, cap: float | None = None) -> None:
        """Retry ``item`` after the delay the rate limiter gives it, and no sooner than
        ``at_least`` seconds (a server's ``Retry-After``); ``cap`` bounds the rate limiter's
        delay (not ``at_least``) for a failure that ends on its own, such as an outage."""
        with self._cond:
            if self._shutting_down:
                return
            delay = self._rate_limiter.when(item)
            delay = max(at_least, delay if cap is None else min(cap, delay))
            self.retries_total += 1
        if self._hooks.on_retry is not None:
            self._hooks.on_retry(item)
        self.add_after(item, delay)

    def forget(self, item: K) -> None:
        """The item succeeded: reset its backoff (does not remove it from the queue)."""
        with self._cond:
            self._rate_limiter.forget(item)

    def num_requeues(self, item: K) -> int:
        with self._cond:
            return self._rate_limiter.num_requeues(item)

    def set_listener(self, listener: QueueListener | None) -> None:
        """Tell ``listener`` when keys become ready or are scheduled (a shared worker pool
        takes from this queue with ``get(block=False)`` instead of blocking in ``get``)."""
        with self._cond:
            self._listener = listener

    # Taking.

    def get(self, block: bool = True, timeout: float | None = None) -> K | None:
        """The next ready item, marked as processing; call ``done`` with it when finished.

        Returns ``None`` on timeout, when not blocking and nothing is ready, or once the queue
        is shut down and drained. ``timeout`` is real time: it bounds how long the calling
        thread blocks, while delayed items become ready by the injected clock.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._promote_due_locked()
                if self._queue:
                    return self._pop_locked()
                if self._shutting_down or not block:
                    return None
                wait = self._seconds_to_next_timer_locked()
                if wait is not None:
                    # A requeue hours or centuries off (a NodeClaim that expires in 2562047h)
                    # is waited for an hour at a time: a longer wait overflows the thread's.
                    wait = min(wait, _LONGEST_WAIT_SECONDS)
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                self._cond.wait(wait)

    def pop_ready(self) -> K | None:
        """Non-blocking ``get`` for the stepped runtime."""
        return self.get(block=False)

    def done(self, item: K) -> None:
        """Processing of ``item`` finished; re-queue it if it was added meanwhile."""
        with self._cond:
            self._processing.discard(item)
            started = self._started_at.pop(item, None)
            if item in self._dirty:
                self._enqueue_locked(item)
                self._cond.notify()
        if started is not None and self._hooks.on_work_duration is not None:
            self._hooks.on_work_duration(max(0.0, self._clock.monotonic() - started))

    def next_ready_time(self) -> float | None:
        """Clock time at which an item can next be taken (now if one is ready); ``None`` if idle."""
        with self._cond:
            if self._queue:
                return self._clock.monotonic()
            self._drop_stale_timers_locked()
            return self._heap[0][0] if self._heap else None

    def notify_clock_advanced(self) -> None:
        """Wake blocked ``get`` calls to re-check timers (for a fake clock moved by hand)."""
        with self._cond:
            self._cond.notify_all()

    # Lifecycle and introspection.

    def shutdown(self) -> None:
        """Stop accepting items; blocked and later ``get`` calls drain what is queued, then end."""
        with self._cond:
            self._shutting_down = True
            self._heap.clear()
            self._waiting.clear()
            self._cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    @property
    def depth(self) -> int:
        """Items ready to be taken (not counting delayed or in-flight ones)."""
        with self._cond:
            return len(self._queue)

    def __len__(self) -> int:
        return self.depth

    def waiting(self) -> int:
        """Items scheduled for later by ``add_after``/``add_rate_limited``."""
        with self._cond:
            return len(self._waiting)

    def processing(self) -> int:
        with self._cond:
            return len(self._processing)

    # Internals (callers hold the lock).

    def _add_locked(self, item: K) -> None:
        if self._shutting_down or item in self._dirty:
            return
        self.adds_total += 1
        if self._hooks.on_add is not None:
            self._hooks.on_add(item)
        self._dirty.add(item)
        if item in self._processing:
            return
        self._enqueue_locked(item)
        self._cond.notify()

    def _enqueue_locked(self, item: K) -> None:
        self._queue.append(item)
        self._queued_at[item] = self._clock.monotonic()
        if self._hooks.on_depth is not None:
            self._hooks.on_depth(len(self._queue))
        if self._listener is not None:
            self._listener.on_ready()

    def _pop_locked(self) -> K:
        item = self._queue.popleft()
        self._dirty.discard(item)
        self._processing.add(item)
        now = self._clock.monotonic()
        self._started_at[item] = now
        queued = self._queued_at.pop(item, None)
        if self._hooks.on_depth is not None:
            self._hooks.on_depth(len(self._queue))
        if queued is not None and self._hooks.on_queue_latency is not None:
            self._hooks.on_queue_latency(max(0.0, now - queued))
        return item

    def _drop_stale_timers_locked(self) -> None:
        while self._heap:
            ready_at, seq, item = self._heap[0]
            if self._waiting.get(item) == (ready_at, seq):
                return
            heapq.heappop(self._heap)

    def _compact_timers_locked(self) -> None:
        # A rescheduled or cancelled timer leaves its heap entry behind, skipped when it comes
        # up; a long delay (an expiry) would keep it for hours, so once stale entries are the
        # majority the heap is rebuilt from the live ones: O(n), at most once per n changes.
        if len(self._heap) > 2 * len(self._waiting) + 16:
            self._heap = [(at, seq, item) for item, (at, seq) in self._waiting.items()]
            heapq.heapify(self._heap)

    def _promote_due_locked(self) -> None:
        now = self._clock.monotonic()
        while True:
            self._drop_stale_timers_locked()
            if not self._heap or self._heap[0][0] > now:
                return
            _, _, item = heapq.heappop(self._heap)
            del self._waiting[item]
            self._add_locked(item)

    def _seconds_to_next_timer_locked(self) -> float | None:
        self._drop_stale_timers_locked()
        if not self._heap:
            return None
        return max(0.0, self._heap[0][0] - self._clock.monotonic())
