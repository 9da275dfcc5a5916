"""A NodePool says whether it can be used, and why not, in its Ready condition."""

from __future__ import annotations

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, EVENTS, NODEPOOLS
from karpenter_capi.core.operator import Operator
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.support import operator_world as world
from tests.support.provider import FakeProvider


def _world() -> tuple[InMemoryAPIServer, Operator]:
    """A NodePool whose NodeClass does not exist yet."""
    clock = FakeClock()
    api = new_cluster(clock=clock)
    operator = world.operator(api, clock, FakeProvider(clock))
    api.create(NODEPOOLS, world.nodepool())
    return api, operator


def _conditions(api: InMemoryAPIServer) -> dict[str, tuple[str, str]]:
    pool = api.get(NODEPOOLS, "general")
    return {
        c["type"]: (c["status"], c["reason"])
        for c in (pool.get("status") or {}).get("conditions") or []
    }


def test_a_nodepool_without_its_nodeclass_is_not_ready_until_it_appears() -> None:
    api, operator = _world()
    driver = operator.stepped()
    driver.advance(1)
    conditions = _conditions(api)
    assert conditions["NodeClassReady"] == ("False", "NodeClassNotFound")
    assert conditions["Ready"][0] == "False"
    assert conditions["ValidationSucceeded"][0] == "True"

    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    driver.advance(1)
    assert _conditions(api)["Ready"][0] == "True"
    reasons = [e["reason"] for e in api.list(EVENTS).items]
    assert "NodePoolReady" in reasons


def test_a_nodeclass_that_is_not_ready_makes_its_nodepool_not_ready() -> None:
    api, operator = _world()
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    driver = operator.stepped()
    driver.advance(1)
    assert _conditions(api)["Ready"][0] == "True"

    api.patch(
        CLUSTER_API_NODE_CLASSES,
        "default",
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "NothingSelected",
                        "message": "the selector matches no MachineDeployment",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ]
            }
        },
        subresource="status",
    )
    driver.advance(1)
    conditions = _conditions(api)
    assert conditions["NodeClassReady"] == ("False", "NodeClassNotReady")
    assert conditions["Ready"][0] == "False"
    warnings = [e for e in api.list(EVENTS).items if e["reason"] == "NodePoolNotReady"]
    assert warnings
    assert "matches no MachineDeployment" in warnings[0]["message"]


def test_a_status_update_does_not_judge_the_instance_types_again() -> None:
    """Every NodeClaim launched updates its NodePool's ``status.resources``; judging the
    pool's instance types again on each such update cost a whole inventory (four lists of
    the management cluster over HTTP) per update, 73 times in a 1,000-pod scale-up. Only a
    changed spec or NodeClass, or a minute, calls for it (issue 25)."""
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = FakeProvider(clock)
    operator = world.operator(api, clock, provider)
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    api.create(NODEPOOLS, world.nodepool())
    driver = operator.stepped()
    driver.advance(1)
    assert _conditions(api)["InstanceTypesSatisfiable"][0] == "True"
    judged = provider.count("instance_types")
    for nodes in range(1, 4):
        api.patch(NODEPOOLS, "general", {"status": {"nodes": nodes}}, subresource="status")
        driver.advance(1)
    assert provider.count("instance_types") == judged
    # A changed spec is judged again.
    api.patch(NODEPOOLS, "general", {"spec": {"weight": 7}})
    driver.advance(1)
    assert provider.count("instance_types") > judged
