"""Two ``karpenter-capi run`` processes against one API over HTTP: one acts, then the other."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.kube.resources import LEASES, NODECLAIMS, PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.demo import DEMO_SCENARIO, mark_unschedulable
from karpenter_capi.sim.manifests import load_manifest_files

LEASE_SECONDS = 2.0


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``condition`` (real time: two real processes are racing); returns seconds taken."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - start


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[InMemoryAPIServer, Path]]:
    # The replicas are real processes on the wall clock: a server on a FakeClock (2026-01-01)
    # stamps their NodeClaims months in the past, so each one was expired and timed out the
    # moment it was created, and the test saw one only if it looked within those milliseconds.
    api = new_cluster(clock=SystemClock())
    api.apply_manifests(load_manifest_files([DEMO_SCENARIO]))
    mark_unschedulable(api)
    with HttpFront(api) as front:
        yield api, write_kubeconfig(front.url, tmp_path / "kubeconfig")


def _start(kubeconfig: Path, identity: str, log: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "karpenter_capi",
        "--log-level",
        "INFO",
        "--log-format",
        "json",
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--leader-election-namespace",
        "default",
        "--leader-election-identity",
        identity,
        "--leader-election-lease-duration",
        str(LEASE_SECONDS),
        "--leader-election-renew-deadline",
        "1.5",
        "--leader-election-retry-period",
        "0.25",
        "--batch-idle-duration",
        "0.2",
        "--metrics-port",
        "-1",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(command, stderr=log.open("wb"), stdout=subprocess.DEVNULL, env=env)


def _records(log: Path) -> list[dict[str, Any]]:
    records = []
    for line in log.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _creations(log: Path) -> list[str]:
    return [
        str(record["NodeClaim"]["name"])
        for record in _records(log)
        if record.get("message") == "created nodeclaim"
    ]


def _writes(log: Path) -> list[str]:
    """What the replica changed in the cluster: NodeClaims created, replicas raised.

    A new leader may have nothing to create: the NodeClaims its predecessor made a moment
    before dying can hold the recreated pods, and it acts by launching those instead.
    """
    return [
        str(record["message"])
        for record in _records(log)
        if record.get("message") == "created nodeclaim"
        or str(record.get("message", "")).startswith("scaled ")
    ]


def _holder(api: InMemoryAPIServer) -> str | None:
    leases = [
        lease
        for lease in api.list(LEASES, namespace="default").items
        if lease["metadata"]["name"] == "karpenter-leader-election"
    ]
    return leases[0]["spec"].get("holderIdentity") if leases else None


def test_one_replica_acts_and_the_other_takes_over_within_the_lease(
    served: tuple[InMemoryAPIServer, Path], tmp_path: Path
) -> None:
    api, kubeconfig = served
    logs = {name: tmp_path / f"{name}.log" for name in ("a", "b")}
    processes = {name: _start(kubeconfig, name, logs[name]) for name in ("a", "b")}
    try:
        _wait_for(lambda: _holder(api) in ("a", "b"), 30, "a leader")
        _wait_for(lambda: bool(api.list(NODECLAIMS).items), 30, "the first NodeClaims")
        leader = _holder(api)
        assert leader is not None
        standby = "b" if leader == "a" else "a"
        claims = {c["metadata"]["name"] for c in api.list(NODECLAIMS).items}
        # The leader may have provisioned again since (a second batch); it made all of them.
        _wait_for(lambda: set(_creations(logs[leader])) >= claims, 10, "the leader's log")
        assert _writes(logs[standby]) == []

        processes[leader].send_signal(signal.SIGKILL)  # no graceful release: the lease expires
        processes[leader].wait(timeout=10)
        killed_at = time.monotonic()
        for pod in api.list(PODS, namespace="default").items:
            api.delete(PODS, pod["metadata"]["name"], "default")
        api.apply_manifests(load_manifest_files([DEMO_SCENARIO]))
        mark_unschedulable(api)
        _wait_for(lambda: _holder(api) == standby, 20, "the standby to take the lease")
        took_over = time.monotonic() - killed_at
        _wait_for(lambda: bool(_writes(logs[standby])), 20, "the new leader to act")
        assert took_over <= LEASE_SECONDS + 1.5

        # SIGTERM: a graceful stop, exit status 0, and the Lease released for a successor.
        processes[standby].send_signal(signal.SIGTERM)
        assert processes[standby].wait(timeout=15) == 0
        assert _holder(api) in (None, "")
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
