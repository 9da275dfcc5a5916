"""``benchmarks/fleet.py --emulators``: workload clusters served by forked emulator processes.

No controller runs here: the test drives the emulators as the benchmark does (a Deployment
scaled through a ``RemoteServer``) and checks what comes back across the pipe: the pods the
emulated ReplicaSet made in the child, the kube-scheduler stand-in's Unschedulable marks,
pending counts, lists, a storm's 429s counted over HTTP, and Secrets naming the child's fronts.
"""

from __future__ import annotations

import argparse
import base64
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from benchmarks import fleet
from benchmarks.fleet_emulators import Emulators, RemoteServer, default_emulators
from karpenter_capi.core.fleet import secret_name
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import PODS, SECRETS
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig


def _until(done: Callable[[], bool], seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.1)
    return done()


def test_default_emulators_is_one_per_ten_clusters_at_most_four() -> None:
    assert [default_emulators(n) for n in (1, 10, 11, 20, 35, 100)] == [1, 1, 2, 2, 4, 4]


def test_emulators_serve_their_clusters_in_other_processes(tmp_path: Path) -> None:
    args = argparse.Namespace(nodes=2, pods=10, workers=1, waves=1)
    world = fleet._world(args, 3)
    names = [c.name for c in world.clusters.values()]
    emulators = Emulators(world, 2, workers=2)
    try:
        assert sorted(len(e.names) for e in emulators.emulators) == [1, 2]
        with HttpFront(world.management) as management:
            kubeconfig = write_kubeconfig(management.url, tmp_path / "management.kubeconfig")
            emulators.start(kubeconfig)
            servers = fleet._servers(world)
            assert all(isinstance(s, RemoteServer) for s in servers.values())
            pids = {e.process.pid for e in emulators.emulators}
            assert len(pids) == 2
            assert os.getpid() not in pids

            fleet._scale(world, names[0], 1, 10)
            first = servers[names[0]]
            # The child's ReplicaSet made the pods; its scheduler stand-in found no node.
            assert _until(lambda: len(first.pods) == 10 and len(first.unschedulable) >= 1)
            assert first.pending_count() == 10
            assert len(first.list(PODS).items) == 10
            assert servers[names[1]].pods == []
            assert first.claims == []

            # Each Secret names the front its emulator serves; that front answers over HTTP.
            secret = world.management.get(SECRETS, secret_name(names[0]), names[0])
            document = yaml.safe_load(base64.b64decode(secret["data"]["value"]))
            url = document["clusters"][0]["cluster"]["server"]
            assert url != management.url
            path = tmp_path / "workload.kubeconfig"
            write_kubeconfig(url, path)
            client = OfficialClient.from_kubeconfig(str(path))
            assert len(client.list(PODS, "default").items) == 10

            hits = emulators.storm(names[0], 60)
            assert hits() == 0
            before = hits()
            with pytest.raises(ApiError):
                client.list(PODS, "default")
            assert hits() > before
    finally:
        emulators.close()
    assert not any(e.process.is_alive() for e in emulators.emulators)
