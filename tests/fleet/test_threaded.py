"""The fleet on threads (``Fleet.run``), as ``run --fleet`` drives it: a workload cluster that
hangs while its controllers are being built holds up no other."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.fleet import Fleet, FleetOptions, Kubeconfig
from karpenter_capi.core.kube import KubeClient
from karpenter_capi.core.operator import OperatorOptions
from tests.fleet.world import FleetWorld


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_a_cluster_hanging_at_connect_delays_no_other() -> None:
    world = FleetWorld(clock=SystemClock())  # type: ignore[arg-type]
    world.add_cluster("alpha")
    world.add_cluster("beta")
    release = threading.Event()

    def connect(kubeconfig: Kubeconfig) -> KubeClient:
        if "alpha" in kubeconfig.server:
            # A server that accepts the connection and never answers, until released.
            release.wait()
        return world.connect(kubeconfig)

    fleet = Fleet(
        world.management,
        clock=SystemClock(),
        connect=connect,
        options=FleetOptions(shards=False, retry_period=0.2),
        operator_options=OperatorOptions(leader_elect=False, metrics_port=None, workers=1),
    )
    stop = threading.Event()
    runner = threading.Thread(target=fleet.run, args=(stop,), daemon=True)
    runner.start()
    try:
        _wait_for(lambda: world.key("beta") in fleet.members, "beta served")
        assert world.key("alpha") not in fleet.members
        release.set()
        _wait_for(lambda: world.key("alpha") in fleet.members, "alpha served once it answers")
    finally:
        release.set()
        stop.set()
        runner.join(timeout=30)
    assert not runner.is_alive()
    assert fleet.members == {}


def test_a_sync_held_up_does_not_hold_up_the_shard_lease_renewals() -> None:
    """The threaded fleet steps its shard coordinator on a thread of its own: a sync stuck
    starting or stopping members (here: its lock held) never lets a held Lease lapse, so the
    replica never fences clusters it holds itself (issue 28 item 3)."""
    pytest.importorskip("karpenter_capi.core.fleet.sharding")
    world = FleetWorld(clock=SystemClock())  # type: ignore[arg-type]
    world.add_cluster("alpha")
    world.add_cluster("beta")
    renew_deadline = 1.5
    fleet = Fleet(
        world.management,
        clock=SystemClock(),
        connect=world.connect,
        options=FleetOptions(
            identity="replica-a",
            lease_namespace="default",
            lease_duration=2.0,
            renew_deadline=renew_deadline,
            retry_period=0.2,
        ),
        operator_options=OperatorOptions(leader_elect=False, metrics_port=None, workers=1),
    )
    keys = [world.key("alpha"), world.key("beta")]
    stop = threading.Event()
    runner = threading.Thread(target=fleet.run, args=(stop,), daemon=True)
    runner.start()
    try:
        _wait_for(lambda: all(k in fleet.members for k in keys), "both clusters served")
        with fleet._lock:  # the sync cannot run meanwhile
            began = time.monotonic()
            while time.monotonic() - began < renew_deadline + 1.0:
                assert all(fleet.coordinator.holds(k) for k in keys)
                time.sleep(0.02)
    finally:
        stop.set()
        runner.join(timeout=30)
    assert not runner.is_alive()
    assert fleet.members == {}
