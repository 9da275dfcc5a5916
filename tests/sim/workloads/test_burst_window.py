"""The provisioner's batch window on the simulated cluster: a Deployment's burst is complete.

``karpenter-capi run`` closes the window 0.2 s after the last new pod once every new pod's
controlling ``apps/v1 ReplicaSet`` has all its replicas (``core.provisioning.batcher``). The
workload emulation must make that chain (Deployment -> ReplicaSet -> pods) for anything built
on it (scenarios, the fleet benchmark) to see the window a real cluster gives.

The stepped driver runs the provisioner at its looks, every ``interval`` (0.5 s), not when the
window asks (``wake_on`` needs a threaded driver): a window closed 0.2 s after the burst is
solved at the 0.5 s look, the full idle second's at the 1 s look.
"""

from __future__ import annotations

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    DEPLOYMENTS,
    NODECLAIMS,
    NODEPOOLS,
)
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads import add_workload_emulation
from tests.sim.workloads.harness import NS, deployment
from tests.support import operator_world as world
from tests.support.provider import FakeProvider


def _cluster(complete_idle: float | None) -> tuple[InMemoryAPIServer, SteppedDriver]:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    api.create(NODEPOOLS, world.nodepool())
    options = OperatorOptions(
        leader_elect=False, metrics_port=None, wake_on_pods=True, batch_complete_idle=complete_idle
    )
    provider = FakeProvider(clock, bind_after_polls=1)
    operator = Operator(api, api, provider.plugins(api), clock, options)
    add_workload_emulation(operator.manager)
    operator.manager.add(SimScheduler(api, operator.manager, clock))
    driver = operator.stepped()
    driver.run_until_quiet()
    return api, driver


def _burst(api: InMemoryAPIServer, driver: SteppedDriver) -> None:
    """A Deployment of 3 replicas that need a node; the emulation makes its pods at once."""
    api.create(
        DEPLOYMENTS,
        deployment("web", 3, containers=[{"name": "app", "resources": {"requests": {"cpu": "1"}}}]),
        NS,
    )
    driver.run_until_quiet()


def test_a_deployments_burst_closes_the_window_before_the_idle_second() -> None:
    api, driver = _cluster(complete_idle=0.2)
    _burst(api, driver)
    driver.advance(0.6)
    assert api.list(NODECLAIMS).items, "the ReplicaSet had its 3 pods: solved at the 0.5 s look"


def test_without_the_short_wait_the_same_burst_waits_the_idle_second() -> None:
    api, driver = _cluster(complete_idle=None)
    _burst(api, driver)
    driver.advance(0.6)
    assert not api.list(NODECLAIMS).items
    driver.advance(0.5)
    assert api.list(NODECLAIMS).items
