"""The lifecycle controllers under the real runtime: the manager's caches, queues and timers."""

from __future__ import annotations

from karpenter_capi.core.lifecycle import lifecycle_controllers
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from tests.core.lifecycle.harness import condition, new_env


def test_a_nodeclaim_becomes_ready_under_the_stepped_driver() -> None:
    env = new_env(bind_after_polls=2)
    manager = Manager(env.api, clock=env.clock)
    manager.add(*lifecycle_controllers(manager.context(env.provider.plugins(env.api))))
    driver = SteppedDriver(manager)
    env.nodeclaim("nc", startup_taints=[{"key": "example.com/agent", "effect": "NoSchedule"}])

    driver.run_until_quiet()
    assert condition(env.get("nc"), "Launched")["reason"] == "Launching"

    # The launch polls on its own timer until the provider binds a machine.
    driver.advance(10)
    provider_id = env.get("nc")["status"]["providerID"]
    assert condition(env.get("nc"), "Launched")["status"] == "True"

    # The kubelet registers the Node: its event wakes the NodeClaim through the manager's index.
    env.node("node-1", provider_id)
    driver.run_until_quiet()
    assert condition(env.get("nc"), "Registered")["status"] == "True"
    assert condition(env.get("nc"), "Initialized")["reason"] == "NodeNotReady"

    env.set_node_ready("node-1")
    driver.run_until_quiet()
    assert condition(env.get("nc"), "Initialized")["reason"] == "StartupTaintsExist"

    env.set_node("node-1", {"spec": {"taints": None}})
    driver.run_until_quiet()
    assert condition(env.get("nc"), "Ready")["status"] == "True"

    # An hour later nothing has been deleted or collected, and nothing is busy.
    driver.advance(3600)
    assert not env.get("nc")["metadata"].get("deletionTimestamp")
    assert len(env.provider.instances) == 1
    assert env.provider.count("delete") == 0


def test_a_leaked_instance_is_collected_under_the_stepped_driver() -> None:
    env = new_env()
    leak = env.provider.add_instance()
    manager = Manager(env.api, clock=env.clock)
    manager.add(*lifecycle_controllers(manager.context(env.provider.plugins(env.api))))
    driver = SteppedDriver(manager)

    driver.advance(31)

    assert leak.state == "deleting"
