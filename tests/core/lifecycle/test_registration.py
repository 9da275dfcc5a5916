"""Registration and initialization: adopting the Node, then waiting until it is usable."""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES
from karpenter_capi.core.lifecycle import NodeClaimLifecycleController
from tests.core.lifecycle.harness import Env, condition

TEAM_TAINT = {"key": "example.com/dedicated", "value": "platform", "effect": "NoSchedule"}
AGENT_TAINT = {"key": "example.com/agent-not-ready", "effect": "NoExecute"}
UNREGISTERED = {"key": wellknown.TAINT_UNREGISTERED_KEY, "effect": "NoExecute"}


def launched(
    env: Env, name: str = "nc", **nodeclaim: Any
) -> tuple[NodeClaimLifecycleController, str]:
    """A launched NodeClaim; returns the controller and the NodeClaim's provider ID."""
    env.nodeclaim(name, **nodeclaim)
    controller = env.lifecycle()
    env.reconcile(controller, name)
    return controller, str(env.get(name)["status"]["providerID"])


def taint_keys(node: dict[str, Any]) -> list[str]:
    return sorted(t["key"] for t in node["spec"].get("taints") or [])


def test_a_node_event_wakes_the_nodeclaim_with_its_provider_id(env: Env) -> None:
    controller, provider_id = launched(env)
    node = env.node("node-1", provider_id)
    env.caches.sync()

    (watch,) = controller.watches()
    assert watch.resource.kind == "Node"
    assert list(watch.to_keys(node)) == ["nc"]
    assert list(watch.to_keys(env.node("stranger", "fake://elsewhere"))) == []


def test_registration_syncs_the_node_and_records_it(env: Env) -> None:
    controller, provider_id = launched(env, taints=[TEAM_TAINT], startup_taints=[AGENT_TAINT])
    env.node("node-1", provider_id, labels={"kubelet.example.com/own": "yes"})

    env.reconcile(controller, "nc")

    claim = env.get("nc")
    node = env.get_node("node-1")
    labels = node["metadata"]["labels"]
    assert labels[wellknown.LABEL_NODEPOOL] == "general"
    assert labels["example.com/team"] == "platform"
    assert labels[wellknown.LABEL_INSTANCE_TYPE] == "small"
    assert labels[wellknown.LABEL_REGISTERED] == "true"
    assert labels["kubelet.example.com/own"] == "yes"
    assert node["metadata"]["annotations"][wellknown.ANNOTATION_NODEPOOL_HASH] == "123"
    assert taint_keys(node) == ["example.com/agent-not-ready", "example.com/dedicated"]
    assert node["metadata"]["finalizers"] == [wellknown.FINALIZER_TERMINATION]
    (owner,) = node["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "NodeClaim",
        "nc",
        claim["metadata"]["uid"],
    )
    assert claim["status"]["nodeName"] == "node-1"
    assert condition(claim, "Registered")["status"] == "True"
    assert not env.events("UnregisteredTaintMissing")
    assert env.metrics.named("nodeclaim_registered") == [("general",)]
    assert env.metrics.named("node_created") == [("general", "zone-a")]


def test_do_not_sync_taints_leaves_the_taints_to_the_provider_but_removes_unregistered(
    env: Env,
) -> None:
    controller, provider_id = launched(env, taints=[TEAM_TAINT], startup_taints=[AGENT_TAINT])
    env.node(
        "node-1",
        provider_id,
        labels={wellknown.ANNOTATION_DO_NOT_SYNC_TAINTS: "true"},
        taints=[UNREGISTERED, {"key": "provider.example.com/own", "effect": "NoSchedule"}],
    )

    env.reconcile(controller, "nc")

    assert taint_keys(env.get_node("node-1")) == ["provider.example.com/own"]
    assert condition(env.get("nc"), "Registered")["status"] == "True"


def test_do_not_sync_taints_annotation_on_the_nodeclaim(env: Env) -> None:
    controller, provider_id = launched(
        env,
        taints=[TEAM_TAINT],
        annotations={wellknown.ANNOTATION_DO_NOT_SYNC_TAINTS: "true"},
    )
    env.node("node-1", provider_id)

    env.reconcile(controller, "nc")

    assert taint_keys(env.get_node("node-1")) == []


def test_a_node_without_the_unregistered_taint_is_registered_with_a_warning(env: Env) -> None:
    controller, provider_id = launched(env)
    env.node("node-1", provider_id, taints=[])

    env.reconcile(controller, "nc")

    assert condition(env.get("nc"), "Registered")["status"] == "True"
    (event,) = env.events("UnregisteredTaintMissing")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "nc"
    assert "node-1" in event["message"]


def test_two_nodes_with_one_provider_id_are_refused(env: Env) -> None:
    controller, provider_id = launched(env)
    env.node("node-1", provider_id)
    env.node("node-2", provider_id)

    env.reconcile(controller, "nc")

    registered = condition(env.get("nc"), "Registered")
    assert (registered["status"], registered["reason"]) == ("False", "MultipleNodesFound")
    assert condition(env.get("nc"), "Ready")["reason"] == "UnhealthyDependents"


def test_startup_taints_are_not_put_back_once_a_daemon_removed_them(env: Env) -> None:
    controller, provider_id = launched(env, startup_taints=[AGENT_TAINT])
    env.node("node-1", provider_id)
    env.reconcile(controller, "nc")
    # Registration's status write was lost (say, a conflict) and the agent has started since.
    env.api.patch(
        NODECLAIMS,
        "nc",
        {"status": {"conditions": None, "nodeName": None}},
        subresource="status",
    )
    env.set_node("node-1", {"spec": {"taints": None}})

    env.reconcile(controller, "nc")

    assert condition(env.get("nc"), "Registered")["status"] == "True"
    assert taint_keys(env.get_node("node-1")) == []


def test_initialization_waits_for_ready_startup_taints_ephemeral_taints_and_devices(
    env: Env,
) -> None:
    controller, provider_id = launched(
        env,
        instance_types=("large",),
        requests={"cpu": "1", "nvidia.com/gpu": "1"},
        startup_taints=[AGENT_TAINT],
    )
    env.node("node-1", provider_id, allocatable={"cpu": "7900m", "nvidia.com/gpu": "0"})

    def initialized() -> tuple[str, str]:
        env.reconcile(controller, "nc")
        found = condition(env.get("nc"), "Initialized")
        return found["status"], found["reason"]

    assert initialized() == ("Unknown", "NodeNotReady")
    env.set_node_ready("node-1")
    assert initialized() == ("Unknown", "StartupTaintsExist")
    env.set_node(
        "node-1",
        {"spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}},
    )
    assert initialized() == ("Unknown", "KnownEphemeralTaintsExist")
    env.set_node("node-1", {"spec": {"taints": None}})
    assert initialized() == ("Unknown", "ResourceNotRegistered")
    assert "nvidia.com/gpu" in condition(env.get("nc"), "Initialized")["message"]
    assert condition(env.get("nc"), "Ready")["status"] == "Unknown"
    assert wellknown.LABEL_INITIALIZED not in env.get_node("node-1")["metadata"]["labels"]

    env.api.patch(
        NODES,
        "node-1",
        {"status": {"allocatable": {"cpu": "7900m", "nvidia.com/gpu": "1"}}},
        subresource="status",
    )
    assert initialized() == ("True", "Initialized")

    claim = env.get("nc")
    ready = condition(claim, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Ready")
    assert env.get_node("node-1")["metadata"]["labels"][wellknown.LABEL_INITIALIZED] == "true"
    assert env.metrics.named("nodeclaim_initialized") == [("general",)]


def test_a_ready_node_goes_from_launch_to_ready_in_one_reconcile(env: Env) -> None:
    env.nodeclaim("nc")
    controller = env.lifecycle()
    env.reconcile(controller, "nc")
    provider_id = env.get("nc")["status"]["providerID"]
    env.node("node-1", provider_id, ready=True)

    result = env.reconcile(controller, "nc")

    assert condition(env.get("nc"), "Ready")["status"] == "True"
    assert result.requeue_after is None


def test_which_pods_a_claim_was_launched_for_stays_off_its_node(env: Env) -> None:
    controller, provider_id = launched(
        env,
        annotations={
            wellknown.ANNOTATION_NOMINATED_PODS: "default/web-0,default/web-1",
            wellknown.ANNOTATION_PLAN: "0123abcd/0/2",
            wellknown.ANNOTATION_PLAN_REST: '[["general","default/web-2"]]',
        },
    )
    env.node("node-1", provider_id)

    env.reconcile(controller, "nc")

    annotations = env.get_node("node-1")["metadata"]["annotations"]
    assert annotations[wellknown.ANNOTATION_NODEPOOL_HASH] == "123"
    # Neither those pods nor the round's plan are the Node's business.
    assert not wellknown.PROVISIONER_NOTES & set(annotations)
    # The claim keeps it: a restarted provisioner reads it there.
    claim_annotations = env.get("nc")["metadata"]["annotations"]
    assert claim_annotations[wellknown.ANNOTATION_NOMINATED_PODS] == "default/web-0,default/web-1"
