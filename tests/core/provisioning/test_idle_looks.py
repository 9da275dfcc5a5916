"""The provisioner's looks skip re-reading caches that have not changed since the last look.

A provisioner looks twice a second; a fleet's idle clusters each did, listing every pod to find
the same answer. A look now compares the round's stores' change counts with the last look's and
does nothing when they, the batch window and the retry timer say nothing new can be found. These
tests hold the opposite side: whatever could change the answer still gets a look.
"""

from __future__ import annotations

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, NODECLAIMS, NODEPOOLS, PODS
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.support import operator_world as world
from tests.support.provider import FakeProvider


def _operator(
    error: Exception | None = None,
) -> tuple[InMemoryAPIServer, FakeProvider, SteppedDriver, list[int]]:
    """The operator on an idle cluster, and a counter of the pod cache's full lists."""
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = FakeProvider(clock, bind_after_polls=10**6)
    provider.instance_types_error = error
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    api.create(NODEPOOLS, world.nodepool())
    operator = world.operator(api, clock, provider)
    driver = operator.stepped()
    driver.run_until_quiet()
    store = operator.manager.informer(PODS).store
    lists = [0]
    original = store.list

    def counted() -> list[dict[str, object]]:
        lists[0] += 1
        return original()  # type: ignore[return-value]

    store.list = counted  # type: ignore[method-assign]
    return api, provider, driver, lists


def test_an_idle_cluster_is_not_re_read_on_every_look() -> None:
    _, _, driver, lists = _operator()
    driver.advance(2)  # one look may read, to learn the cluster is idle
    before = lists[0]
    driver.advance(30)  # 60 provisioner looks (63 lists before looks were skipped)
    # The disruption controller's 10 s polls still read the pods: 3 in 30 s.
    assert lists[0] - before <= 3, f"{lists[0] - before} pod lists in 30 idle seconds"


def test_a_pod_arriving_after_idle_looks_is_launched_for() -> None:
    api, _, driver, _ = _operator()
    driver.advance(30)
    world.pending_pod(api, "web-0")
    driver.advance(5)
    assert len(api.list(NODECLAIMS).items) == 1


def test_pods_left_pending_by_a_failed_nodepool_are_retried_with_nothing_changed() -> None:
    """A NodePool whose instance types cannot be read leaves its pods pending, and the cloud
    API's recovery changes nothing in the caches: the retry must still come."""
    api, provider, driver, _ = _operator(error=RuntimeError("cloud API down"))
    world.pending_pod(api, "web-0")
    driver.advance(5)
    assert not api.list(NODECLAIMS).items
    provider.instance_types_error = None  # the cloud API is back; the caches saw nothing
    # Without skipped looks the NodeClaim comes 16 s after the API is back: the same here.
    driver.advance(20)
    assert len(api.list(NODECLAIMS).items) == 1, "the pod was retried after the NodePool error"
