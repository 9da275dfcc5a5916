"""The controller as production runs it: ``karpenter-capi run`` in a process of its own.

Why a module: the benchmarks that measure the controller over HTTP (``realapi.py`` for one
cluster, ``fleet.py`` for a fleet) start it the same way, stop it the same way and read its
CPU-seconds and memory from ``/proc`` the same way, so that its figures are its own and not
the emulated control plane's, which runs in the benchmark's process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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
) -> subprocess.Popen[bytes]:
    """``karpenter-capi run --kubeconfig KUBECONFIG`` with leader election and metrics off,
    its JSON log in ``log``; ``extra`` are more flags (``--fleet`` ...)."""
    command = [
        sys.executable,
        "-m",
        "karpenter_capi",
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
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(command, stderr=log.open("wb"), stdout=subprocess.DEVNULL, env=env)


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
