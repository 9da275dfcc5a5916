"""The controller as production runs it: ``karpenter-capi run`` in a process of its own.

Why a module: the benchmarks that measure the controller over HTTP (``realapi.py`` for one
cluster, ``fleet.py`` for a fleet) start it the same way, stop it the same way and read its
CPU-seconds and memory from ``/proc`` the same way, so that its figures are its own and not
the emulated control plane's, which runs in the benchmark's process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


class ProcessStats:
    """CPU-seconds and RSS of a process, from ``/proc`` (Linux); NaN once it is gone."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._tick = os.sysconf("SC_CLK_TCK")

    def cpu_seconds(self) -> float:
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / self._tick  # utime + stime

    def runqueue_wait_seconds(self) -> float:
        """Seconds the process's threads have spent runnable but waiting for a core, summed
        over the threads alive now (``/proc/PID/task/*/schedstat``, second field): how much
        the machine, not the process's own work, held it back. Threads that ended since an
        earlier reading are missing from a later one, so a difference is a lower bound."""
        total = 0
        try:
            tasks = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return float("nan")
        for task in tasks:
            try:
                total += int(Path(f"/proc/{self.pid}/task/{task}/schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue
        return total / 1e9

    def _status_mb(self, key: str) -> float:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith(key):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def peak_rss_mb(self) -> float:
        return self._status_mb("VmHWM:")

    def rss_mb(self) -> float:
        return self._status_mb("VmRSS:")

    def threads(self) -> int:
        try:
            return len(os.listdir(f"/proc/{self.pid}/task"))
        except OSError:
            return 0


def start_controller(
    kubeconfig: Path,
    log: Path,
    extra: Sequence[str] = (),
    *,
    log_level: str = "INFO",
    thread_cpu: Path | None = None,
    stages: Path | None = None,
) -> subprocess.Popen[bytes]:
    """``karpenter-capi run --kubeconfig KUBECONFIG`` with leader election and metrics off,
    its JSON log in ``log``; ``extra`` are more flags (``--fleet`` ...). With ``thread_cpu``,
    under ``controller_threads.py``, which writes its threads' CPU there when asked
    (``ThreadCpu``); with ``stages`` too, its decisions' stages (``controller_stages``) there,
    written on the same signal just before."""
    entry = ["-m", "karpenter_capi"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if thread_cpu is not None or stages is not None:
        entry = [str(Path(__file__).resolve().parent / "controller_threads.py")]
    if thread_cpu is not None:
        env[THREAD_CPU_ENV] = str(thread_cpu)
    if stages is not None:
        env[STAGES_ENV] = str(stages)
    command = [
        sys.executable,
        *entry,
        "--log-level",
        log_level,
        "--log-format",
        "json",
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--no-leader-elect",
        "--metrics-port",
        "-1",
        *extra,
    ]
    return subprocess.Popen(command, stderr=log.open("wb"), stdout=subprocess.DEVNULL, env=env)


THREAD_CPU_ENV = "KARPENTER_CAPI_THREAD_CPU"
"""``controller_threads.ENV``: where the wrapped controller writes its threads' CPU."""
STAGES_ENV = "KARPENTER_CAPI_STAGES"
"""``controller_stages.ENV``: where it writes its decisions' stages."""


class ThreadCpu:
    """A controller started with ``thread_cpu``: its CPU-seconds by thread name, read when
    asked (``SIGUSR1``, answered in the file)."""

    def __init__(self, pid: int, path: Path) -> None:
        self.pid, self.path = pid, path
        self._sequence = 0

    def read(self, timeout: float = 30.0) -> dict[str, float]:
        """Each thread name's CPU-seconds so far, and ``(process)``: its total; empty if the
        controller did not answer within ``timeout`` seconds."""
        self._sequence += 1
        try:
            os.kill(self.pid, signal.SIGUSR1)
        except OSError:
            return {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data = json.loads(self.path.read_text())
            except (OSError, ValueError):
                data = {}
            if data.get("sequence", 0) >= self._sequence:
                return {**data["threads"], "(process)": data["process"]}
            time.sleep(0.02)
        return {}


def cpu_by_thread(start: dict[str, float], end: dict[str, float]) -> dict[str, float]:
    """CPU-seconds each thread name used between two ``ThreadCpu.read``s (to the millisecond:
    the threads' figures are exact, read from ``schedstat``), largest first, those of 1 ms or
    more; ``(other)``: the process's CPU (in clock ticks) no live or ended thread accounts for."""
    if not start or not end:
        return {}
    spent = {name: end[name] - start.get(name, 0.0) for name in end if name != "(process)"}
    # Not 0.01 s: a 26-pod scale-up's rounds took under a clock tick once a round cost 10 ms.
    shown = {name: round(cpu, 3) for name, cpu in spent.items() if cpu >= 0.001}
    other = end["(process)"] - start["(process)"] - sum(spent.values())
    ordered = dict(sorted(shown.items(), key=lambda item: -item[1]))
    return {**ordered, "(other)": round(other, 2)}


def stop_on_sigterm() -> None:
    """Make SIGTERM (``kill``, ``pkill``, a CI job's timeout) end this benchmark through its
    ``finally`` blocks, which stop the controller and the emulators: Python's default for
    SIGTERM ends the process at once, leaving those children running, and busy, with no parent
    to stop them. Call it from the main thread."""

    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


def stop_controller(controller: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM (a graceful stop, as the kubelet asks), then SIGKILL if it does not end."""
    if controller.poll() is not None:
        return
    controller.send_signal(signal.SIGTERM)
    try:
        controller.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        controller.kill()
        controller.wait()


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now (for the controller's ``/metrics``)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


ROUNDS_METRIC = "karpenter_scheduler_scheduling_duration_seconds_count{"
CREATED_METRIC = "karpenter_nodeclaims_created_total{"


def provisioning_counts(port: int) -> dict[str, float]:
    """From the controller's ``/metrics`` on ``port``, summed over clusters: ``rounds``, the
    provisioning rounds that solved pending pods (each observes the scheduling duration once),
    and ``nodeclaims_created``. Empty when the endpoint does not answer."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    rounds = created = 0.0
    for line in text.splitlines():
        if line.startswith(ROUNDS_METRIC) and 'controller="provisioner"' in line:
            rounds += float(line.rsplit(" ", 1)[1])
        elif line.startswith(CREATED_METRIC):
            created += float(line.rsplit(" ", 1)[1])
    return {"rounds": rounds, "nodeclaims_created": created}


RECONCILE_SECONDS_METRIC = "controller_runtime_reconcile_time_seconds_sum{"


def reconcile_seconds(port: int) -> dict[str, float]:
    """From the controller's ``/metrics`` on ``port``: each cluster's seconds spent in its
    controllers' reconciles and periodic runs so far (the time it held a worker), keyed by the
    ``cluster`` label (``""`` outside fleet mode). Empty when the endpoint does not answer."""
    import re
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    seconds: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(RECONCILE_SECONDS_METRIC):
            found = re.search(r'cluster="([^"]*)"', line)
            cluster = found.group(1) if found else ""
            seconds[cluster] = seconds.get(cluster, 0.0) + float(line.rsplit(" ", 1)[1])
    return seconds
