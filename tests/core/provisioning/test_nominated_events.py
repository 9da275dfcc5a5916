"""``Nominated`` Events are rate-limited as upstream Karpenter limits them (issue 25).

One Event per planned pod made a 1,000-pod round post ~950 Events, the bulk of the controller's
API requests and CPU in that scale-up. Upstream shares one token bucket (5 per second, burst 10:
``PodNominationRateLimiter`` in ``pkg/controllers/provisioning/scheduling/events.go``) across
all pods; so does this controller, on the injected clock. The plan itself stays on the
NodeClaims (``karpenter.cluster.x-k8s.io/nominated-pods``), which are not rate-limited.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import EVENTS, NODECLAIMS, PODS
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.provisioning.provisioner import Provisioner
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.demo import DEMO_SCENARIO, mark_unschedulable
from karpenter_capi.sim.manifests import load_manifest_files

BURST = 10


def _world(pods: int) -> tuple[InMemoryAPIServer, Provisioner, FakeClock]:
    clock = FakeClock()
    server = new_cluster(clock=clock)
    server.apply_manifests(load_manifest_files([Path(DEMO_SCENARIO)]))
    for pod in server.list(PODS).items:  # only small pods: every one of them is planned
        if not (pod.get("spec") or {}).get("nodeName"):
            server.delete(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
    for n in range(pods):
        server.create(PODS, _small_pod(f"web-{n:03d}"), "default")
    mark_unschedulable(server)
    plugins = Plugins.load(
        ["generic_capi"],
        PluginEnvironment(
            workload=server, management=server, clock=clock, logger=logging.getLogger("t")
        ),
    )
    return server, Provisioner(server, plugins, clock), clock


def _small_pod(name: str) -> dict[str, Any]:
    return copy.deepcopy(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "nginx",
                        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                    }
                ]
            },
        }
    )


def _nominated(server: InMemoryAPIServer) -> list[dict[str, Any]]:
    return [e for e in server.list(EVENTS).items if e.get("reason") == "Nominated"]


def test_a_round_nominating_100_pods_posts_at_most_a_burst_of_events() -> None:
    server, provisioner, _ = _world(100)
    report = provisioner.reconcile()
    planned = {pod for d in report.launched for pod in d.pods}
    assert len(planned) == 100
    events = _nominated(server)
    assert 0 < len(events) <= BURST
    for event in events:
        assert event["message"].startswith("Pod should schedule on: nodeclaim/")
    # The whole plan is still on the NodeClaims, where nothing limits it.
    on_claims = {
        key
        for claim in server.list(NODECLAIMS).items
        for key in claim["metadata"]["annotations"][wellknown.ANNOTATION_NOMINATED_PODS].split(",")
    }
    assert on_claims == planned


def test_the_bucket_refills_on_the_injected_clock() -> None:
    server, provisioner, clock = _world(30)
    provisioner.reconcile()
    assert len(_nominated(server)) == BURST
    # Two seconds later 10 more tokens (5 per second): more pods, and 10 more Events at most.
    for n in range(30):
        server.create(PODS, _small_pod(f"late-{n:03d}"), "default")
    mark_unschedulable(server)
    provisioner.reconcile()
    assert len(_nominated(server)) == BURST  # no time passed: the bucket is empty
    clock.advance(2)
    for n in range(30):
        server.create(PODS, _small_pod(f"later-{n:03d}"), "default")
    mark_unschedulable(server)
    provisioner.reconcile()
    assert len(_nominated(server)) == 2 * BURST
