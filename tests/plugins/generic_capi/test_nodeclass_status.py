"""The ClusterAPINodeClass Ready condition and the Events a user sees in ``kubectl describe``."""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.api import ClusterAPINodeClass
from karpenter_capi.core.hookspecs import PluginContext
from karpenter_capi.core.kube.discovery import CapiResources
from karpenter_capi.core.kube.errors import Conflict
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, EVENTS
from karpenter_capi.plugins.generic_capi.inventory import collect_inventory
from karpenter_capi.plugins.generic_capi.nodeclass_status import update_nodeclass_status
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from tests.plugins.generic_capi.inventory_builders import (
    PRICE,
    add,
    new_env,
    nodeclass,
    scalable,
    sized,
)


def _round(ctx: PluginContext, capi: CapiResources, name: str = "default") -> bool:
    """What the plugin does each provisioning round: inventory, then status."""
    live = ctx.workload.get(CLUSTER_API_NODE_CLASSES, name)
    model = ClusterAPINodeClass.model_validate(live)
    return update_nodeclass_status(ctx, model, collect_inventory(ctx, model, capi))


def _ready(server: InMemoryAPIServer, name: str = "default") -> dict[str, Any]:
    conditions = server.get(CLUSTER_API_NODE_CLASSES, name)["status"]["conditions"]
    [ready] = [c for c in conditions if c["type"] == "Ready"]
    return dict(ready)


def _events(server: InMemoryAPIServer) -> list[tuple[str, str, str]]:
    return sorted(
        (e["type"], e["reason"], e["message"])
        for e in server.list(EVENTS).items
        if e["involvedObject"]["kind"] == "ClusterAPINodeClass"
    )


def test_a_selector_matching_nothing_is_not_ready() -> None:
    server, _, ctx, capi = new_env()
    add(server, capi, nodeclass(), scalable("MachineDeployment", "not-member", labels={}))
    assert _round(ctx, capi)
    ready = _ready(server)
    assert (ready["status"], ready["reason"]) == ("False", "NoScalableResources")
    assert ready["message"] == (
        "spec.scalableResourceSelector matches no MachineDeployment, MachineSet or MachinePool "
        "labelled node.cluster.x-k8s.io/karpenter-member"
    )
    assert ready["observedGeneration"] == 1
    assert _events(server) == [("Warning", "NoScalableResources", ready["message"])]


def test_all_selected_resources_unusable_is_not_ready_with_an_event_per_problem() -> None:
    server, _, ctx, capi = new_env()
    add(
        server,
        capi,
        nodeclass(),
        scalable("MachineDeployment", "bad", annotations=sized("many")),
        scalable("MachineDeployment", "paused", annotations={"cluster.x-k8s.io/paused": ""}),
    )
    assert _round(ctx, capi)
    ready = _ready(server)
    assert (ready["status"], ready["reason"]) == ("False", "NoUsableScalableResources")
    assert ready["message"].splitlines() == [
        "none of the 2 selected scalable resources is usable:",
        "- MachineDeployment default/paused: paused (cluster.x-k8s.io/paused); not scaled",
        "- MachineDeployment default/bad: annotation "
        "capacity.cluster-autoscaler.kubernetes.io/cpu='many': 'many': not a valid Kubernetes "
        "quantity",
    ]
    assert [(kind, reason) for kind, reason, _ in _events(server)] == [
        ("Normal", "Paused"),
        ("Warning", "InvalidShape"),
    ]


def test_ready_when_something_is_usable_listing_what_was_left_out_and_why() -> None:
    server, _, ctx, capi = new_env()
    add(
        server,
        capi,
        nodeclass(),
        scalable("MachineDeployment", "good", annotations=sized(**{PRICE: "0.1"})),
        scalable("MachineDeployment", "cheap", annotations=sized("1", "2Gi")),
        scalable("MachineDeployment", "bad", annotations=sized("many")),
    )
    assert _round(ctx, capi)
    ready = _ready(server)
    assert (ready["status"], ready["reason"]) == ("True", "Ready")
    assert ready["message"].splitlines() == [
        "2 of 3 selected scalable resources make 2 instance types",
        "left out:",
        "- MachineDeployment default/bad: annotation "
        "capacity.cluster-autoscaler.kubernetes.io/cpu='many': 'many': not a valid Kubernetes "
        "quantity",
        "notes:",
        "- MachineDeployment default/cheap: no karpenter.cluster.x-k8s.io/price annotation; "
        "price estimated from the shape as 0.040085 per hour",
    ]
    assert [(kind, reason) for kind, reason, _ in _events(server)] == [
        ("Normal", "PriceEstimated"),
        ("Warning", "InvalidShape"),
    ]


def test_an_unchanged_verdict_is_not_rewritten_and_events_are_not_repeated() -> None:
    server, clock, ctx, capi = new_env()
    add(
        server,
        capi,
        nodeclass(),
        scalable("MachineDeployment", "good", annotations=sized(**{PRICE: "0.1"})),
        scalable("MachineDeployment", "bad", annotations=sized("many")),
    )
    assert _round(ctx, capi)
    written = server.get(CLUSTER_API_NODE_CLASSES, "default")["metadata"]["resourceVersion"]
    since = _ready(server)["lastTransitionTime"]
    clock.advance(600)
    assert not _round(ctx, capi)
    assert not _round(ctx, capi)
    assert server.get(CLUSTER_API_NODE_CLASSES, "default")["metadata"]["resourceVersion"] == (
        written
    )
    assert len(_events(server)) == 1

    # A new problem: the message changes, one Event for the newcomer only, and the condition
    # keeps its transition time because Ready stays True.
    add(server, capi, scalable("MachineSet", "worse", annotations=sized(**{PRICE: "free"})))
    clock.advance(60)
    assert _round(ctx, capi)
    assert _ready(server)["lastTransitionTime"] == since
    assert [reason for _, reason, message in _events(server) if "worse" in message] == [
        "InvalidShape"
    ]
    assert len(_events(server)) == 2

    # Everything unusable now: Ready flips, and the transition time moves.
    server.delete(capi.machine_deployments, "good", "default")
    clock.advance(60)
    assert _round(ctx, capi)
    ready = _ready(server)
    assert (ready["status"], ready["reason"]) == ("False", "NoUsableScalableResources")
    assert ready["lastTransitionTime"] != since


def test_conditions_of_other_types_are_kept_and_a_deleted_nodeclass_is_no_error() -> None:
    server, _, ctx, capi = new_env()
    add(server, capi, nodeclass())
    live = server.get(CLUSTER_API_NODE_CLASSES, "default")
    live["status"] = {
        "conditions": [
            {
                "type": "ValidationSucceeded",
                "status": "True",
                "reason": "Valid",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    server.update(CLUSTER_API_NODE_CLASSES, live, subresource="status")
    model = ClusterAPINodeClass.model_validate(live)
    inventory = collect_inventory(ctx, model, capi)
    assert update_nodeclass_status(ctx, model, inventory)
    types = [
        c["type"] for c in server.get(CLUSTER_API_NODE_CLASSES, "default")["status"]["conditions"]
    ]
    assert types == ["ValidationSucceeded", "Ready"]

    server.delete(CLUSTER_API_NODE_CLASSES, "default")
    assert not update_nodeclass_status(ctx, model, inventory)


def test_an_invalid_configuration_is_not_ready_with_the_reason() -> None:
    server, _, ctx, capi = new_env({"kube_reserved": "cpu"})
    add(server, capi, nodeclass(), scalable("MachineDeployment", "md", annotations=sized()))
    assert _round(ctx, capi)
    ready = _ready(server)
    assert (ready["status"], ready["reason"]) == ("False", "InvalidConfiguration")
    assert (
        ready["message"]
        == "plugin option kube_reserved: 'cpu' is not resource=quantity or resource=N%"
    )


def test_a_concurrent_status_write_is_retried_next_round_without_duplicate_events() -> None:
    server, _, ctx, capi = new_env()
    add(server, capi, nodeclass(), scalable("MachineDeployment", "bad", annotations=sized("x")))
    # The write over the caller's copy conflicts, then the one over a fresh read too.
    server.faults.fail(
        "patch", "clusterapinodeclasses", Conflict("the object has been modified"), times=2
    )
    assert not _round(ctx, capi)
    assert "conditions" not in server.get(CLUSTER_API_NODE_CLASSES, "default").get("status", {})
    assert _events(server) == []
    assert _round(ctx, capi)
    assert _ready(server)["reason"] == "NoUsableScalableResources"
    assert [reason for _, reason, _ in _events(server)] == ["InvalidShape"]


def test_a_verdict_the_callers_copy_already_shows_costs_no_read() -> None:
    """Every round and every launch call judges the NodeClass; over a real API a read of it
    each time was one request in twenty of a 1,000-pod scale-up. The copy the caller passes
    (the informer's) already shows the verdict, or is the very version this process wrote it
    over (the informer has not delivered the write yet): nothing is read or written."""
    server, clock, ctx, capi = new_env()
    add(
        server,
        capi,
        nodeclass(),
        scalable("MachineDeployment", "good", annotations=sized(**{PRICE: "0.1"})),
    )
    before_write = ClusterAPINodeClass.model_validate(
        server.get(CLUSTER_API_NODE_CLASSES, "default")
    )
    assert update_nodeclass_status(ctx, before_write, collect_inventory(ctx, before_write, capi))
    model = ClusterAPINodeClass.model_validate(server.get(CLUSTER_API_NODE_CLASSES, "default"))
    before = server.requests.snapshot()
    clock.advance(60)
    assert not update_nodeclass_status(ctx, model, collect_inventory(ctx, model, capi))
    assert not update_nodeclass_status(
        ctx, before_write, collect_inventory(ctx, before_write, capi)
    )
    assert server.requests.since(before).get("get", 0) == 0
    assert server.requests.since(before).get("patch/status", 0) == 0
    # A copy that lags another's write (a stale cache) and a new verdict: the write over the
    # copy is refused, a read and a write over it follow.
    server.patch(CLUSTER_API_NODE_CLASSES, "default", {"metadata": {"labels": {"a": "b"}}})
    add(server, capi, scalable("MachineDeployment", "bad", annotations=sized("x")))
    before = server.requests.snapshot()
    assert update_nodeclass_status(ctx, model, collect_inventory(ctx, model, capi))
    assert server.requests.since(before).get("get", 0) == 1
    assert "bad" in _ready(server)["message"]


def test_a_changed_verdict_is_written_over_the_callers_copy_without_a_read() -> None:
    """The copy the caller passes (the informer's) is current: the new verdict is written with
    its resourceVersion as the precondition, no read first."""
    server, _, ctx, capi = new_env()
    add(server, capi, nodeclass(), scalable("MachineDeployment", "bad", annotations=sized("x")))
    assert _round(ctx, capi)
    assert _ready(server)["reason"] == "NoUsableScalableResources"
    add(server, capi, scalable("MachineDeployment", "good", annotations=sized()))
    model = ClusterAPINodeClass.model_validate(server.get(CLUSTER_API_NODE_CLASSES, "default"))
    inventory = collect_inventory(ctx, model, capi)
    before = server.requests.snapshot()
    assert update_nodeclass_status(ctx, model, inventory)
    assert server.requests.since(before).get("get", 0) == 0
    assert _ready(server)["reason"] == "Ready"
