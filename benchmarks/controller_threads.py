"""``karpenter-capi`` that tells, when asked, how much CPU each of its threads has used.

Why: a benchmark reads the controller's CPU-seconds from ``/proc`` as one figure, and on a
shared machine that figure moves by seconds between runs of the same code (issue 25 item 5),
so a change to one part cannot be told from noise. Split by thread, the parts are apart: the
provisioner's rounds (``periodic-provisioner``), the NodeClaim lifecycle
(``worker-nodeclaim.lifecycle``), each informer's decoding and handlers (``informer-...``), the
nomination writes (``nominate-pod``). Python names its threads but the kernel does not see those
names, so the controller itself has to say: on ``SIGUSR1`` this wrapper writes, to the file
named by ``KARPENTER_CAPI_THREAD_CPU``, each thread name's CPU-seconds so far (threads of the
same name with a trailing number summed), counting threads that have ended too (thread pools
come and go), and the process's total. Nothing else of the controller changes: the command
line is ``karpenter-capi``'s.

With ``KARPENTER_CAPI_PROFILE`` naming a directory, each thread also runs under ``cProfile``
and every ``SIGUSR1`` writes, there, one ``pstats`` file per thread name (``NAME.prof``, a
pool's threads merged) with what each has run so far: where a thread's CPU goes. Profiling
slows calls down, so its CPU figures are not the ones to report.

With ``KARPENTER_CAPI_STAGES`` naming a file, a ``controller_stages.StageRecorder`` times each
scale-up decision's stages inside the controller, and every ``SIGUSR1`` (and the exit) writes
its recording there, before the threads' CPU: a reader that sees the CPU answered reads the
stages written for the same signal.

    python benchmarks/controller_threads.py [karpenter-capi arguments ...]
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any, Final

ENV: Final = "KARPENTER_CAPI_THREAD_CPU"
STAGES_ENV: Final = "KARPENTER_CAPI_STAGES"
PROFILE_ENV: Final = "KARPENTER_CAPI_PROFILE"
_TICK: Final = os.sysconf("SC_CLK_TCK")
_NUMBERED: Final = re.compile(r"[-_]\d+$")

_ended: Counter[str] = Counter()
_lock = threading.Lock()
_writes = 0
_profiles: list[tuple[str, Any]] = []  # (thread name group, its cProfile.Profile)
_stages: Any = None  # the ``controller_stages.StageRecorder``, with ``KARPENTER_CAPI_STAGES``


def group(name: str) -> str:
    """``nominate-pod_3`` -> ``nominate-pod``: a pool's threads count as one."""
    return _NUMBERED.sub("", name)


def _cpu_of(native_id: int | None) -> float | None:
    """A live thread's CPU-seconds, to the nanosecond (``schedstat``'s run time: the clock
    ``time.thread_time`` reads, which counts the threads that ended)."""
    try:
        return int(Path(f"/proc/self/task/{native_id}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def snapshot() -> dict[str, Any]:
    """Each thread name's CPU-seconds (live and ended threads), and the process's total."""
    with _lock:
        by_name = Counter(_ended)
    for thread in threading.enumerate():
        cpu = _cpu_of(thread.native_id)
        if cpu is not None:
            by_name[group(thread.name)] += cpu
    # As ``ProcessStats`` reads it (utime + stime, in clock ticks).
    process = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return {"threads": dict(by_name), "process": (int(process[11]) + int(process[12])) / _TICK}


def _write(_signum: int, _frame: FrameType | None) -> None:
    global _writes
    _writes += 1
    if _stages is not None:
        _stages.write(Path(os.environ[STAGES_ENV]))
    if not os.environ.get(ENV):
        return
    path = Path(os.environ[ENV])
    data = {"sequence": _writes, **snapshot()}
    if os.environ.get(PROFILE_ENV):
        # Before the answer: a reader that copies the profiles once answered gets these.
        _write_profiles(Path(os.environ[PROFILE_ENV]))
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data))
    partial.replace(path)


def _write_profiles(directory: Path) -> None:
    import pstats

    directory.mkdir(parents=True, exist_ok=True)
    by_group: dict[str, pstats.Stats] = {}
    with _lock:
        profiles = list(_profiles)
    for name, profile in profiles:
        profile.snapshot_stats()  # what the thread has run so far; it keeps profiling
        stats = pstats.Stats()
        stats.stats, stats.total_calls = profile.stats, 0
        stats.get_top_level_stats()
        if name in by_group:
            by_group[name].add(stats)
        else:
            by_group[name] = stats
    for name, stats in by_group.items():
        stats.dump_stats(directory / f"{name.replace('/', '_')}.prof")


def _count_ended_threads() -> None:
    """Add each thread's CPU to its name's count when it ends (``/proc`` forgets it)."""
    original = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    profiling = bool(os.environ.get(PROFILE_ENV))

    def bootstrap_inner(self: threading.Thread) -> None:
        try:
            if profiling:
                import cProfile

                # CPU time, not wall time: a thread waiting for the GIL or the network is not
                # spending CPU.
                profile = cProfile.Profile(time.thread_time_ns, 1e-9)
                with _lock:
                    _profiles.append((group(self.name), profile))
                profile.runcall(original, self)
            else:
                original(self)
        finally:
            spent = time.thread_time()
            with _lock:
                _ended[group(self.name)] += spent

    threading.Thread._bootstrap_inner = bootstrap_inner  # type: ignore[attr-defined]


def _record_stages(path: Path) -> None:
    """Time the decisions' stages (``controller_stages``), written on ``SIGUSR1`` and at exit."""
    global _stages
    import atexit

    from benchmarks.controller_stages import StageRecorder, install

    _stages = StageRecorder()
    install(_stages)
    atexit.register(_stages.write, path)


def main() -> int:
    _count_ended_threads()
    if os.environ.get(STAGES_ENV):
        _record_stages(Path(os.environ[STAGES_ENV]))
    if os.environ.get(ENV) or os.environ.get(STAGES_ENV):
        signal.signal(signal.SIGUSR1, _write)
    from karpenter_capi.cli import main as karpenter_capi

    # No ``argv``: the command reads ``sys.argv`` and owns its process, as the console script
    # does, so it tunes the collector as production does (``cli.run._settle_heap``).
    return int(karpenter_capi() or 0)


if __name__ == "__main__":
    # The repository root, for ``benchmarks.controller_stages`` (run as a script, only this
    # file's folder is on the path).
    sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
