"""Where each scale-up decision's time goes inside a ``karpenter-capi run --fleet`` process.

Why: ``fleet.py`` reads a decision's latency on the emulated API servers (a wave's first pod
created to its first NodeClaim created). In ``--mode inprocess`` its ``_Probe`` splits that
into stages, but there the controller shares one GIL with the emulation, so its figures are not
production's. In ``--mode http`` the controller is a process of its own, so it has to time the
stages itself: with ``KARPENTER_CAPI_STAGES`` naming a file, ``controller_threads.py`` installs
a ``StageRecorder`` before the command starts and writes its recording there on each
``SIGUSR1`` and at exit. The wrappers call through, timing on ``time.monotonic`` (system-wide
on Linux, so the benchmark's timestamps compare with the controller's); nothing the controller
decides changes. What they keep is bounded and only what ``decision_stages`` needs, per
cluster key (a fleet member's ``namespace/name``; ``""`` for a controller of one cluster):

- ``seen``: the new pending pods the batch window saw (``ProvisioningController._pod_event``
  asking for a wake-up), as runs ``[first, last, due of the last, count]``; a run ends at the
  cluster's next round and after a gap of ``SEEN_GAP`` seconds (the waves' pods come seconds
  after the last wave's pods stopped being pending);
- ``rounds``: each ``Provisioner.reconcile`` ``[start, end, thread CPU, first create's start,
  its end, creates]`` (the first create is the round's own; the others run beside it);

and for the process: the collector's pauses of generation 1 or 2 over ``PAUSE_KEPT_OVER``
seconds; by generation, every collection's count, wall seconds, CPU-seconds (the collecting
thread's ``time.thread_time``: a collection holds the interpreter, so its wall time less its CPU
is the machine's load), objects freed (``collected``) and found uncollectable; the heap the
collector sees when the recording is written (``heap``: objects tracked per generation, frozen,
the young counter, pymalloc's blocks); and each controller's runs, CPU-seconds and wall seconds
on the fleet's worker pool (``WorkerPool._serve``).

The other half runs in the benchmark: ``decision_stages`` splits one decision by its cluster's
recording, ``pool_and_collector`` tells what the waves cost the pool and the collector.
"""

from __future__ import annotations

import gc
import json
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

ENV: Final = "KARPENTER_CAPI_STAGES"
SEEN_GAP: Final = 0.5
"""Seconds without a new pending pod after which the next one starts a new run of ``seen``."""
PAUSE_KEPT_OVER: Final = 0.02
KEPT: Final = 256
"""Runs of ``seen`` and rounds kept per cluster, and pauses kept (the newest)."""

_FIRST, _LAST, _DUE, _COUNT = range(4)
_START, _END, _CPU, _CREATE_START, _CREATE_END, _CREATES = range(6)


class _Cluster:
    def __init__(self) -> None:
        self.seen: deque[list[float]] = deque(maxlen=KEPT)
        self.rounds: deque[list[Any]] = deque(maxlen=KEPT)
        self.run_open = False
        """Whether the next new pending pod may extend ``seen[-1]`` (no round began since)."""


class StageRecorder:
    """Times a controller's decisions from around its functions (``install``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # Reentrant: a SIGUSR1 handler may write while its own thread holds it.
        self._lock = threading.RLock()
        self._clusters: dict[str, _Cluster] = {}
        # A member's provisioning controller and provisioner -> its cluster key.
        self._keys: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        # A provisioner -> the record of the round it is running.
        self._rounds: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()
        self._pauses: deque[tuple[float, float, int]] = deque(maxlen=KEPT)
        # generation -> [count, seconds, CPU-seconds, collected, uncollectable]
        self._collections: dict[int, list[float]] = {}
        self._collecting: tuple[float, int, float] | None = None
        self._pool: dict[str, list[float]] = {}  # controller -> [runs, CPU, wall]

    def _cluster(self, owner: Any) -> _Cluster:
        key = self._keys.get(owner, "")
        cluster = self._clusters.get(key)
        if cluster is None:
            cluster = self._clusters[key] = _Cluster()
        return cluster

    def named(self, key: str, *owners: Any) -> None:
        """``owners`` (a member's controller and provisioner) record under cluster ``key``."""
        with self._lock:
            for owner in owners:
                self._keys[owner] = key

    def saw(self, controller: Any, due: float) -> None:
        """A new pending pod, its batch window due to close at ``due``."""
        now = self.clock()
        with self._lock:
            cluster = self._cluster(controller)
            run = cluster.seen[-1] if cluster.seen and cluster.run_open else None
            if run is None or now - run[_LAST] > SEEN_GAP:
                cluster.seen.append([now, now, due, 1])
                cluster.run_open = True
            else:
                run[_LAST], run[_DUE], run[_COUNT] = now, due, run[_COUNT] + 1

    def round_began(self, provisioner: Any) -> list[Any]:
        record = [self.clock(), None, None, None, None, 0]
        with self._lock:
            cluster = self._cluster(provisioner)
            cluster.run_open = False
            cluster.rounds.append(record)
            self._rounds[provisioner] = record
        return record

    def round_ended(self, provisioner: Any, record: list[Any], cpu: float) -> None:
        record[_END], record[_CPU] = self.clock(), cpu
        with self._lock:
            if self._rounds.get(provisioner) is record:
                del self._rounds[provisioner]

    def created(self, provisioner: Any, start: float, end: float) -> None:
        """A NodeClaim create of ``provisioner``'s round ran from ``start`` to ``end``."""
        with self._lock:
            record = self._rounds.get(provisioner)
            if record is None:
                return
            record[_CREATES] += 1
            if record[_CREATE_START] is None or start < record[_CREATE_START]:
                record[_CREATE_START], record[_CREATE_END] = start, end

    def served(self, controller: str, cpu: float, wall: float) -> None:
        with self._lock:
            spent = self._pool.setdefault(controller, [0, 0.0, 0.0])
            spent[0] += 1
            spent[1] += cpu
            spent[2] += wall

    def on_collection(self, phase: str, info: dict[str, Any]) -> None:
        """``gc.callbacks``' signature. No lock: a collection may start inside any code."""
        if phase == "start":
            self._collecting = (self.clock(), info["generation"], time.thread_time())
            return
        if self._collecting is None:
            return
        began, generation, cpu = self._collecting
        self._collecting = None
        seconds = self.clock() - began
        counted = self._collections.setdefault(generation, [0, 0.0, 0.0, 0, 0])
        counted[0] += 1
        counted[1] += seconds
        counted[2] += time.thread_time() - cpu
        counted[3] += info.get("collected", 0)
        counted[4] += info.get("uncollectable", 0)
        if generation >= 1 and seconds > PAUSE_KEPT_OVER:
            self._pauses.append((began, seconds, generation))

    def recording(self) -> dict[str, Any]:
        """What ``write`` writes, as JSON-ready data."""
        heap = heap_now()
        with self._lock:
            return {
                "written_at": self.clock(),
                "clusters": {
                    key: {"seen": [list(r) for r in c.seen], "rounds": [list(r) for r in c.rounds]}
                    for key, c in self._clusters.items()
                },
                "pauses": [list(p) for p in list(self._pauses)],
                "collections": {str(g): list(c) for g, c in dict(self._collections).items()},
                "pool": {name: list(spent) for name, spent in self._pool.items()},
                "heap": heap,
            }

    def write(self, path: Path) -> None:
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(self.recording()))
        partial.replace(path)


def heap_now() -> dict[str, Any]:
    """What the cyclic collector sees now: the objects it tracks in each generation (a walk
    of each list, about 10 ms a million), those frozen (``gc.freeze``, never walked), the
    generations' counters and thresholds, its own totals (``gc.get_stats``) and pymalloc's
    allocated blocks (every small object, tracked or not)."""
    return {
        "tracked": [len(gc.get_objects(generation)) for generation in range(3)],
        "frozen": gc.get_freeze_count(),
        "count": list(gc.get_count()),
        "threshold": list(gc.get_threshold()),
        "stats": gc.get_stats(),
        "blocks": sys.getallocatedblocks(),
    }


@contextmanager
def installed(recorder: StageRecorder) -> Iterator[StageRecorder]:
    """``recorder`` timing every controller built while installed (``install``), then the
    classes as they were."""
    undo = install(recorder)
    try:
        yield recorder
    finally:
        undo()


def install(recorder: StageRecorder) -> Callable[[], None]:
    """Wrap the controller's functions to feed ``recorder``; returns what undoes it. Before
    any controller is built: the informers keep the bound ``_pod_event`` they were given."""
    from karpenter_capi.core.fleet.members import Member
    from karpenter_capi.core.provisioning.controller import ProvisioningController
    from karpenter_capi.core.provisioning.provisioner import Provisioner
    from karpenter_capi.core.runtime.pool import WorkerPool

    originals: list[tuple[type, str, Any]] = []

    def wrap(cls: type, name: str, make: Callable[[Any], Any]) -> None:
        original = cls.__dict__[name]
        originals.append((cls, name, original))
        setattr(cls, name, make(original))

    def member_init(original: Any) -> Any:
        def __init__(self: Any, key: str, *args: Any, **kwargs: Any) -> None:
            original(self, key, *args, **kwargs)
            controller = self.operator.provisioning
            recorder.named(key, controller, controller._provisioner)

        return __init__

    def pod_event(original: Any) -> Any:
        def _pod_event(self: Any, pod: Any) -> float | None:
            due: float | None = original(self, pod)
            if due is not None:
                recorder.saw(self, due)
            return due

        return _pod_event

    def reconcile(original: Any) -> Any:
        def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
            record = recorder.round_began(self)
            cpu = time.thread_time()
            try:
                return original(self, *args, **kwargs)
            finally:
                recorder.round_ended(self, record, time.thread_time() - cpu)

        return timed

    def create(original: Any) -> Any:
        def _create(self: Any, body: Any) -> Any:
            start = recorder.clock()
            try:
                return original(self, body)
            finally:
                recorder.created(self, start, recorder.clock())

        return _create

    def serve(original: Any) -> Any:
        def _serve(self: Any, slot: Any) -> Any:
            cpu, wall = time.thread_time(), recorder.clock()
            try:
                return original(self, slot)
            finally:
                spent = time.thread_time() - cpu
                recorder.served(slot.entry.name, spent, recorder.clock() - wall)

        return _serve

    wrap(Member, "__init__", member_init)
    wrap(ProvisioningController, "_pod_event", pod_event)
    wrap(Provisioner, "reconcile", reconcile)
    wrap(Provisioner, "_create", create)
    wrap(WorkerPool, "_serve", serve)
    gc.callbacks.append(recorder.on_collection)

    def undo() -> None:
        gc.callbacks.remove(recorder.on_collection)
        for cls, name, original in reversed(originals):
            setattr(cls, name, original)

    return undo


# In the benchmark's process: reading a recording.


def read_recording(path: Path) -> dict[str, Any]:
    """The recording last written to ``path``; empty if there is none."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data


def decision_stages(
    recording: dict[str, Any], key: str, first_pod: float, claim: float
) -> dict[str, float] | None:
    """Where one decision of cluster ``key`` went (seconds), from its wave's first pod created
    (``first_pod``) to its first NodeClaim created (``claim``), both read on the API server.

    The round is the last to start after ``first_pod`` whose first create began by ``claim``;
    the pods it saw are the runs of ``seen`` that end after ``first_pod`` and began before
    the round. ``None`` when the recording has no such round or no pod seen before it (a round
    the recheck ran, say)."""
    cluster = (recording.get("clusters") or {}).get(key)
    if not cluster:
        return None
    rounds = [
        r
        for r in cluster["rounds"]
        if r[_START] >= first_pod and r[_CREATE_START] is not None and r[_CREATE_START] <= claim
    ]
    if not rounds:
        return None
    chosen = rounds[-1]
    seen = [s for s in cluster["seen"] if s[_LAST] >= first_pod and s[_FIRST] < chosen[_START]]
    if not seen:
        return None
    last = max(seen, key=lambda s: s[_LAST])
    # A run that began before the wave (rare: a pod seen within ``SEEN_GAP`` of it) counts
    # from the wave's first pod.
    first_seen = max(first_pod, min(s[_FIRST] for s in seen))
    return {
        "to_first_seen": first_seen - first_pod,
        "burst_seen": last[_LAST] - first_seen,
        "window": last[_DUE] - last[_LAST],
        "wake": chosen[_START] - last[_DUE],
        "round_wall": chosen[_CREATE_START] - chosen[_START],
        "round_cpu": chosen[_CPU] or 0.0,
        "first_create": chosen[_CREATE_END] - chosen[_CREATE_START],
        "collector_paused": overlap(recording.get("pauses") or [], first_pod, claim),
    }


def overlap(pauses: Sequence[Sequence[float]], start: float, end: float) -> float:
    """Seconds of the collector's ``pauses`` ``[start, seconds, ...]`` within ``start..end``."""
    return sum(
        (max(0.0, min(end, began + seconds) - max(start, began)) for began, seconds, *_ in pauses),
        0.0,
    )


def pool_and_collector(
    before: dict[str, Any], after: dict[str, Any], start: float, end: float
) -> dict[str, Any]:
    """Between two recordings: each pooled controller's runs, CPU-seconds and wall seconds
    (largest CPU first, those of 0.01 s or more), and the collector's pauses that began within
    ``start..end`` (those ``KEPT``), with every collection's seconds by generation."""
    earlier = before.get("pool") or {}
    pool = {}
    for name, (runs, cpu, wall) in (after.get("pool") or {}).items():
        was = earlier.get(name, [0, 0.0, 0.0])
        if cpu - was[1] >= 0.01:
            pool[name] = {
                "runs": int(runs - was[0]),
                "cpu_s": round(cpu - was[1], 2),
                "wall_s": round(wall - was[2], 2),
            }
    pool = dict(sorted(pool.items(), key=lambda item: -item[1]["cpu_s"]))
    pauses = [p for p in after.get("pauses") or [] if start <= p[0] <= end]
    counted = before.get("collections") or {}
    collections = {
        generation: round(c[1] - counted.get(generation, [0, 0.0])[1], 2)
        for generation, c in (after.get("collections") or {}).items()
    }
    by_generation = {}
    for generation, c in (after.get("collections") or {}).items():
        was = [*counted.get(generation, []), 0, 0.0, 0.0, 0, 0][:5]
        now = [*c, 0.0, 0, 0][:5]
        by_generation[generation] = {
            "count": int(now[0] - was[0]),
            "wall_s": round(now[1] - was[1], 2),
            "cpu_s": round(now[2] - was[2], 2),
            "collected": int(now[3] - was[3]),
            "uncollectable": int(now[4] - was[4]),
        }
    return {
        "pool": pool,
        "collector": {
            "pauses": len(pauses),
            "pause_seconds": round(sum((p[1] for p in pauses), 0.0), 2),
            "longest_ms": round(max((p[1] for p in pauses), default=0.0) * 1000, 1),
            "seconds_by_generation": collections,
            "by_generation": by_generation,
            "heap_before": before.get("heap"),
            "heap_after": after.get("heap"),
        },
    }
