"""Calls made together on the process's shared writer threads (``nominations.Writers``).

A provisioning round creates its NodeClaims, then writes its pods' ``Nominated`` Events,
several at a time. Each round used to start (and join) a ``ThreadPoolExecutor`` for each: up to
``create_concurrency`` new threads, twice a round. In a fleet a new thread's start waits for the
interpreter (``Thread.start`` returns once the thread has run), so a round's NodeClaims after
the first waited behind other clusters' threads before their requests went out, and the
threads were started again a few hundred milliseconds later by the next round. Here the calls
go to ``Writers``, whose threads outlive a round (ending after 10 s idle) and start only when
none is idle: the round's own thread is one lane, the writers run the others.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final, TypeVar

from karpenter_capi.core.provisioning.nominations import Writers

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
