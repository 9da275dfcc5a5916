"""The interruption controller: notices from a plugin's queue and from Nodes' taints."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.hookspecs import (
    REBALANCE_RECOMMENDATION,
    SPOT_INTERRUPTED,
    InterruptionNotice,
)
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.interruption import InterruptionController
from karpenter_capi.core.kube.errors import ApiError, NotFound
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PODS,
)
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.plugin_api import PluginContext, hookimpl
from tests.core.lifecycle.harness import Env, new_env

OWNER = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "name": "web",
    "uid": "u",
    "controller": True,
}


class FakeQueue:
    """A plugin whose queue holds notices until they are handed back (like SQS)."""

    def __init__(self) -> None:
        self.queued: list[InterruptionNotice] = []
        self.deleted: list[InterruptionNotice] = []

    @hookimpl
    def karpenter_capi_interruptions(self, ctx: PluginContext) -> list[InterruptionNotice]:
        return list(self.queued)

    @hookimpl
    def karpenter_capi_interruptions_handled(
        self, notices: list[InterruptionNotice], ctx: PluginContext
    ) -> None:
        for notice in notices:
            self.queued.remove(notice)
            self.deleted.append(notice)


def with_queue(env: Env) -> FakeQueue:
    queue = FakeQueue()
    env.ctx.plugins = Plugins.from_objects(
        [("fake", env.provider), ("queue", queue)],
        PluginEnvironment(workload=env.api, management=env.api, clock=env.clock),
    )
    return queue


def spot_node(env: Env, name: str = "spot-1", **node_options: object) -> str:
    """A launched, registered spot NodeClaim with its Node; returns its provider ID."""
    env.nodeclaim(name, capacity_types=("spot",))
    env.reconcile(env.lifecycle(), name)
    provider_id = str(env.get(name)["status"]["providerID"])
    env.node(f"node-{name}", provider_id, ready=True, taints=[], **node_options)  # type: ignore[arg-type]
    return provider_id


def deleting(env: Env, name: str) -> bool:
    try:
        return bool(env.get(name)["metadata"].get("deletionTimestamp"))
    except NotFound:
        return True


def inventory(env: Env) -> list[InstanceType]:
    """What the solver and launches are offered for NodePool ``general``."""
    nodeclass = ClusterAPINodeClass.model_validate(env.api.get(CLUSTER_API_NODE_CLASSES, "default"))
    nodepool = NodePool.model_validate(env.api.get(NODEPOOLS, "general"))
    return env.ctx.plugins.instance_types(nodeclass, nodepool)


def run(env: Env, controller: InterruptionController) -> None:
    env.caches.sync()
    controller.run_once()
    env.caches.sync()


def test_a_spot_warning_deletes_the_nodeclaim_marks_the_offering_and_deletes_the_message() -> None:
    env = new_env()
    queue = with_queue(env)
    provider_id = spot_node(env)
    claim = env.get("spot-1")
    assert claim["metadata"]["labels"][wellknown.LABEL_TOPOLOGY_ZONE] == "zone-b"
    deadline = env.clock.now() + timedelta(minutes=2)
    instance_id = provider_id.rsplit("/", 1)[-1]
    queue.queued.append(InterruptionNotice(SPOT_INTERRUPTED, instance_id, deadline, "r-1"))
    controller = InterruptionController(env.ctx)

    run(env, controller)

    assert deleting(env, "spot-1"), "termination drains it now"
    assert queue.queued == []
    assert len(queue.deleted) == 1
    warned = env.events("SpotInterrupted")
    assert {e["involvedObject"]["kind"] for e in warned} == {"NodeClaim", "Node"}
    assert "Spot interruption warning was triggered" in warned[0]["message"]
    assert deadline.isoformat() in warned[0]["message"]
    terminating = {
        e["involvedObject"]["kind"]: (e["type"], e["message"])
        for e in env.events("TerminatingOnInterruption")
    }
    assert terminating == {
        "NodeClaim": (
            "Warning",
            "Interruption triggered termination for the NodeClaim: the instance is going",
        ),
        "Node": (
            "Warning",
            "Interruption triggered termination for the Node: the instance is going",
        ),
    }
    assert env.metrics.named("nodeclaim_disrupted") == [(SPOT_INTERRUPTED, "general", "spot")]
    assert env.metrics.named("interruption_received") == [(SPOT_INTERRUPTED,)]
    assert env.metrics.named("interruption_deleted") == [(1,)]
    # The solver no longer sees the interrupted offering, for three minutes.
    small = next(it for it in inventory(env) if it.name == "small")
    assert [o.available for o in small.offerings if o.capacity_type == "spot"] == [False]
    env.clock.advance(180)
    small = next(it for it in inventory(env) if it.name == "small")
    assert [o.available for o in small.offerings if o.capacity_type == "spot"] == [True]


def test_acting_again_is_harmless_and_says_nothing_twice() -> None:
    env = new_env()
    queue = with_queue(env)
    provider_id = spot_node(env)
    notice = InterruptionNotice(SPOT_INTERRUPTED, provider_id, receipt="r-1")
    controller = InterruptionController(env.ctx)
    queue.queued.append(notice)
    run(env, controller)
    queue.queued.append(notice)  # delivered twice, as SQS may
    run(env, controller)
    # A restarted controller sees the NodeClaim deleting: no new Event either.
    queue.queued.append(notice)
    run(env, InterruptionController(env.ctx))
    assert len(env.events("SpotInterrupted")) == 2  # NodeClaim and Node, once
    assert queue.queued == []


def test_a_failed_write_keeps_the_message_for_later(caplog: pytest.LogCaptureFixture) -> None:
    env = new_env()
    queue = with_queue(env)
    provider_id = spot_node(env)
    queue.queued.append(InterruptionNotice(SPOT_INTERRUPTED, provider_id, receipt="r-1"))
    controller = InterruptionController(env.ctx)
    original = env.api.patch

    def unreachable(*args: object, **kwargs: object) -> object:
        raise ApiError("the server is unavailable")

    env.api.patch = unreachable  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        run(env, controller)
        run(env, controller)
    assert len(queue.queued) == 1, "the message stays until the notice is on the NodeClaim"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "interruption: NodeClaim spot-1 on spot_interrupted failed (will retry): "
        "the server is unavailable"
    ], "one line per change, not one per poll"
    env.api.patch = original  # type: ignore[method-assign]
    run(env, controller)
    assert deleting(env, "spot-1")
    assert queue.queued == []


def test_a_restarted_controller_finishes_from_the_nodeclaim() -> None:
    env = new_env()
    queue = with_queue(env)
    provider_id = spot_node(env)
    queue.queued.append(
        InterruptionNotice(SPOT_INTERRUPTED, provider_id, env.clock.now() + timedelta(minutes=2))
    )
    original = env.api.delete

    def unreachable(*args: object, **kwargs: object) -> object:
        raise ApiError("the server is unavailable")

    env.api.delete = unreachable  # type: ignore[method-assign]
    run(env, InterruptionController(env.ctx))
    assert queue.queued == [], "the notice is recorded on the NodeClaim: the message can go"
    annotations = env.get("spot-1")["metadata"]["annotations"]
    assert annotations[wellknown.ANNOTATION_INTERRUPTION] == SPOT_INTERRUPTED
    env.api.delete = original  # type: ignore[method-assign]
    run(env, InterruptionController(env.ctx))  # a new process: nothing in memory
    assert deleting(env, "spot-1")


def test_a_rebalance_recommendation_is_only_an_event() -> None:
    env = new_env()
    queue = with_queue(env)
    provider_id = spot_node(env)
    queue.queued.append(InterruptionNotice(REBALANCE_RECOMMENDATION, provider_id, receipt="r"))
    run(env, InterruptionController(env.ctx))
    assert not deleting(env, "spot-1")
    assert len(env.events("SpotRebalanceRecommendation")) == 2
    assert queue.queued == []


def test_a_notice_about_no_nodeclaim_is_deleted_and_touches_nothing() -> None:
    env = new_env()
    queue = with_queue(env)
    spot_node(env)
    queue.queued.append(InterruptionNotice(SPOT_INTERRUPTED, "i-0notours", receipt="r"))
    run(env, InterruptionController(env.ctx))
    assert queue.queued == []
    assert not deleting(env, "spot-1")


def test_node_termination_handler_taint_is_a_spot_warning() -> None:
    env = new_env()
    spot_node(env)
    env.set_node(
        "node-spot-1",
        {
            "spec": {
                "taints": [
                    {
                        "key": "aws-node-termination-handler/spot-itn",
                        "value": "spot-itn-event-1",
                        "effect": "NoSchedule",
                    }
                ]
            }
        },
    )
    controller = InterruptionController(env.ctx)
    run(env, controller)
    run(env, controller)  # the taint is still there: seen again, counted once
    assert deleting(env, "spot-1")
    message = env.events("SpotInterrupted")[0]["message"]
    assert "aws-node-termination-handler taint aws-node-termination-handler/spot-itn" in message
    assert env.metrics.named("interruption_received") == [(SPOT_INTERRUPTED,)]


@pytest.mark.parametrize(
    ("reason", "deleted"), [("PreemptScheduled", True), ("RebootScheduled", False)]
)
def test_azure_scheduled_event_condition(reason: str, deleted: bool) -> None:
    env = new_env()
    spot_node(env)
    env.api.patch(
        NODES,
        "node-spot-1",
        {
            "status": {
                "conditions": [{"type": "VMEventScheduled", "status": "True", "reason": reason}]
            }
        },
        subresource="status",
    )
    run(env, InterruptionController(env.ctx))
    assert deleting(env, "spot-1") is deleted


def test_the_pods_stay_until_their_replacement_is_initialized() -> None:
    env = new_env()
    queue = with_queue(env)
    provider_id = spot_node(env)
    env.api.patch(
        NODECLAIMS, "spot-1", {"status": {"nodeName": "node-spot-1"}}, subresource="status"
    )
    env.api.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "default", "ownerReferences": [OWNER]},
            "spec": {"nodeName": "node-spot-1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"},
        },
    )
    plan: dict[str, str] = {}
    controller = InterruptionController(env.ctx, planned=lambda: plan)
    queue.queued.append(
        InterruptionNotice(SPOT_INTERRUPTED, provider_id, env.clock.now() + timedelta(minutes=2))
    )

    run(env, controller)
    assert not deleting(env, "spot-1"), "nothing ready for its pod yet"
    node = env.get_node("node-spot-1")
    assert {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert queue.queued == []

    # Provisioning launched the replacement; it is not initialized yet.
    env.nodeclaim("replacement")
    plan["default/web-1"] = "replacement"
    env.clock.advance(20)
    run(env, controller)
    assert not deleting(env, "spot-1")

    env.api.patch(
        NODECLAIMS,
        "replacement",
        {
            "status": {
                "conditions": [
                    {
                        "type": "Initialized",
                        "status": "True",
                        "reason": "Initialized",
                        "message": "",
                        "lastTransitionTime": "2026-12-02T04:00:00Z",
                    }
                ]
            }
        },
        subresource="status",
    )
    run(env, controller)
    assert deleting(env, "spot-1")
    message = env.events("TerminatingOnInterruption")[0]["message"]
    assert message.endswith("its pods have a node ready for them")


def test_without_a_ready_replacement_the_nodeclaim_goes_with_30s_left() -> None:
    env = new_env()
    queue = with_queue(env)
    provider_id = spot_node(env)
    env.api.patch(
        NODECLAIMS, "spot-1", {"status": {"nodeName": "node-spot-1"}}, subresource="status"
    )
    env.api.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "default", "ownerReferences": [OWNER]},
            "spec": {"nodeName": "node-spot-1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"},
        },
    )
    controller = InterruptionController(env.ctx, planned=dict)
    queue.queued.append(
        InterruptionNotice(SPOT_INTERRUPTED, provider_id, env.clock.now() + timedelta(minutes=2))
    )
    run(env, controller)
    env.clock.advance(89)
    run(env, controller)
    assert not deleting(env, "spot-1")
    env.clock.advance(1)
    run(env, controller)
    assert deleting(env, "spot-1")
    assert (
        "30s left before the instance goes" in env.events("TerminatingOnInterruption")[0]["message"]
    )
