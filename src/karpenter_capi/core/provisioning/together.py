"""Calls made together on the process's shared writer threads (``Writers``).

A provisioning round creates its NodeClaims, then writes its pods' ``Nominated`` Events,
several at a time. Each round used to start (and join) a ``ThreadPoolExecutor`` for each: up to
``create_concurrency`` new threads, twice a round. In a fleet a new thread's start waits for the
interpreter (``Thread.start`` returns once the thread has run), so a round's NodeClaims after
the first waited behind other clusters' threads before their requests went out, and the
threads were started again a few hundred milliseconds later by the next round. Here the calls
go to ``Writers``, whose threads outlive a round (ending after 10 s idle) and start only when
none is idle: the round's own thread is one lane, the writers run the others. The nomination
controller's writes (``nominations.py``, whose pattern this was first) go the same way.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final, TypeVar

log = logging.getLogger(__name__)


class Writers:
    """Threads that run writes for every cluster of the process (nominations, a round's
    creates and Events): one is started only when a job finds none idle, and one idle for
    ``idle_seconds`` ends.

    Why not an executor per pass: each pass with several writes started (and joined) its own
    ``ThreadPoolExecutor``, up to ``write_concurrency`` new threads a pass; in a 100-cluster
    fleet that was thousands of thread start-ups a wave, about 50 µs of CPU each, on top of
    the writes. Why not one executor per controller: its threads never end, eight a cluster.
    Here the threads live as long as passes keep them busy, so the process holds at most what
    the passes in flight use together (as many as the executors did at their peak), and none
    once nominating has stopped for ``idle_seconds``. Jobs are not bounded here: each pass
    bounds its own (``write_concurrency``), so a cluster whose API hangs holds only its own.
    """

    def __init__(self, name: str = "nominate-pod", idle_seconds: float = 10.0) -> None:
        self._name = name
        self._idle_seconds = idle_seconds
        self._lock = threading.Condition(threading.Lock())
        self._jobs: deque[Callable[[], None]] = deque()
        self._idle = 0  # threads waiting for a job
        self._started = 0
        self.threads = 0
        """Threads started and not ended."""

    def run(self, job: Callable[[], None]) -> None:
        """Run ``job`` on an idle thread, or on a new one if none is idle (here, if no thread
        can be started). ``job`` must not raise (what it raises is logged and dropped)."""
        with self._lock:
            if self._idle > len(self._jobs):  # a waiting thread no queued job has claimed
                self._jobs.append(job)
                self._lock.notify()
                return
            self._started += 1
            self.threads += 1
            name = f"{self._name}_{self._started}"
        try:
            threading.Thread(target=self._work, args=(job,), name=name, daemon=True).start()
        except RuntimeError:  # no thread to be had: the job runs here, as it would have
            with self._lock:
                self.threads -= 1
            self._run(job)

    def _work(self, job: Callable[[], None]) -> None:
        while True:
            self._run(job)
            with self._lock:
                self._idle += 1
                while not self._jobs:
                    if not self._lock.wait(self._idle_seconds) and not self._jobs:
                        # Idle that long, and no job queued: none was counted on this one.
                        self._idle -= 1
                        self.threads -= 1
                        return
                job = self._jobs.popleft()
                self._idle -= 1

    @staticmethod
    def _run(job: Callable[[], None]) -> None:
        try:
            job()
        except Exception:
            log.exception("a shared writer's job raised")


T = TypeVar("T")
R = TypeVar("R")

CREATES: Final = Writers("create-nodeclaim")
"""The process's threads for a round's NodeClaim creates, shared by every cluster's round."""
EVENTS: Final = Writers("nominated-event")
"""The process's threads for a round's ``Nominated`` Events."""


def together(
    writers: Writers, call: Callable[[T], R], items: Sequence[T], concurrency: int
) -> list[R]:
    """``call`` of each of ``items``, results in their order, ``concurrency`` lanes taking the
    next item as each finishes one: this thread is one lane, ``writers`` run the others. What
    a call raises is raised here once every lane has stopped (a lane stops at its first)."""
    results: list[R | None] = [None] * len(items)
    todo = deque(enumerate(items))
    lanes = max(1, min(concurrency, len(items)))
    done = threading.Semaphore(0)
    failures: list[BaseException] = []

    def lane() -> None:
        try:
            while not failures:
                try:
                    index, item = todo.popleft()
                except IndexError:
                    return
                results[index] = call(item)
        except BaseException as error:  # raised in the caller, as the executor's map did
            failures.append(error)

    def helper() -> None:
        try:
            lane()
        finally:
            done.release()

    for _ in range(lanes - 1):
        writers.run(helper)
    lane()
    for _ in range(lanes - 1):
        done.acquire()
    if failures:
        raise failures[0]
    return results  # type: ignore[return-value]  # every index was filled
