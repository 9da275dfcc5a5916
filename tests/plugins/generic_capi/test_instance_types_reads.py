"""What the inventory hook reads from the API when nothing changed: nothing.

Every provisioning round and every disruption pass asks each NodeClass's instance types. Against
a real API server (the plugin's mirrors follow watches) a call on an unchanged cluster used to
read each selected MachineDeployment again for its rollout strategy once its ten-second cache
had expired, and the NodeClass before judging whether its status needed a write: round trips
inside every scale-up decision.
"""

from __future__ import annotations

from karpenter_capi.core.api import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, NODEPOOLS
from karpenter_capi.plugins.generic_capi.mirror import WatchedLists
from tests.plugins.generic_capi.env import CountingClient, Env
from tests.plugins.generic_capi.lagging import LaggingApi

_READS = ("get", "list")


def _reads(env: Env, before: dict[str, int]) -> dict[str, int]:
    now = env.api.requests.by_resource()
    return {
        key: count - before.get(key, 0)
        for key, count in sorted(now.items())
        if key.split(" ", 1)[0] in _READS and count > before.get(key, 0)
    }


def _models(env: Env) -> tuple[ClusterAPINodeClass, NodePool]:
    """The NodeClass and NodePool as a round has them (the informer's copies)."""
    return (
        ClusterAPINodeClass.model_validate(env.api.get(CLUSTER_API_NODE_CLASSES, "default")),
        NodePool.model_validate(env.api.get(NODEPOOLS, "general")),
    )


def test_an_inventory_call_on_an_unchanged_cluster_reads_nothing(env: Env) -> None:
    env.deployment("md-a", strategy="RollingUpdate")
    env.deployment("md-b", price=0.2, instance_type="m5.xlarge")
    client = LaggingApi(env.api)  # mirrors follow watches, as over a real API server
    env.plugin_management = CountingClient(client)
    env.plugin_workload = CountingClient(client)
    env.restart()
    try:
        # The first call lists, reads templates, writes the status.
        assert len(env.plugins.instance_types(*_models(env))) == 2
        client.deliver()
        for _ in range(3):
            env.clock.advance(11)  # past the scalable resources' ten-second cache
            models = _models(env)
            before = env.api.requests.by_resource()
            assert len(env.plugins.instance_types(*models)) == 2
            assert _reads(env, before) == {}
        # The rollout notice still comes from the watched MachineDeployment.
        ready = next(
            c
            for c in env.api.get(CLUSTER_API_NODE_CLASSES, "default")["status"]["conditions"]
            if c["type"] == "Ready"
        )
        assert "MachineDeployment default/md-a" in ready["message"]
        assert "rollout strategy" in ready["message"]
    finally:
        lists = WatchedLists.shared(env.plugins.context("generic_capi"))
        if lists is not None:
            lists.close()
