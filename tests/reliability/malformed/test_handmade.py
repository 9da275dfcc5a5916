"""NodeClaims and Nodes made by hand, next to the ones the controller makes.

A NodeClaim without a NodePool (or naming one that does not exist) says so in its ``Launched``
condition, naming the label to fix; one naming a NodeClass that does not exist is given up with
a Warning Event on it. A Node carrying Karpenter's labels that no NodeClaim holds gets a Warning
Event saying the controller does not manage it. A NodeClaim the model refuses (a duration
upstream's CRDs admit) says so in ``Ready`` and, once deleted, gives its Machine back. In every
case the good Deployment's pods run.
"""

from __future__ import annotations

import io
import logging
from typing import Any

import pytest

from karpenter_capi.cli.explain import explain
from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import MACHINES, NODECLAIMS, NODES
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.plugins.generic_capi.binding import ANNOTATION_MACHINE, ANNOTATION_NODECLAIM
from tests.support.operator_world import nodeclaim_crd_without_duration_bounds

from .world import GOOD, NAMESPACE, NODECLASS_REF, NODEPOOL, World, resource


def _nodeclaim(world: World, name: str, labels: dict[str, str], **spec: Any) -> None:
    world.server.create(
        NODECLAIMS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeClassRef": NODECLASS_REF, "requirements": [], **spec},
        },
    )


def _launched(world: World, name: str) -> dict[str, Any]:
    return world.condition(NODECLAIMS, name, "Launched")


@pytest.mark.parametrize(
    ("labels", "words"),
    [
        pytest.param(
            {},
            ("no karpenter.sh/nodepool label", "name the NodePool it belongs to"),
            id="no-nodepool-label",
        ),
        pytest.param(
            {wellknown.LABEL_NODEPOOL: "ghost"},
            ("NodePool ghost", "karpenter.sh/nodepool", "not found"),
            id="nodepool-missing",
        ),
    ],
)
def test_a_hand_made_nodeclaim_without_its_nodepool_says_so_on_itself(
    labels: dict[str, str], words: tuple[str, ...]
) -> None:
    world = World()
    _nodeclaim(world, "hand", labels)
    world.deploy()
    world.run()

    launched = _launched(world, "hand")
    assert (launched["status"], launched["reason"]) == ("Unknown", "NodePoolNotFound"), launched
    assert all(word in launched["message"] for word in words), launched["message"]
    world.assert_good_resource_served()


def test_a_hand_made_nodeclaim_naming_a_missing_nodeclass_is_given_up_with_an_event() -> None:
    world = World()
    _nodeclaim(
        world,
        "hand",
        {wellknown.LABEL_NODEPOOL: NODEPOOL},
        nodeClassRef={**NODECLASS_REF, "name": "ghost"},
    )
    world.deploy()
    world.run()

    event = world.event_about("ClusterAPINodeClass ghost not found")
    assert (event.kind, event.name, event.type) == ("NodeClaim", "hand", "Warning")
    assert "hand" not in [c["metadata"]["name"] for c in world.nodeclaims()]
    world.assert_good_resource_served()


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param({wellknown.LABEL_NODEPOOL: NODEPOOL}, id="nodepool"),
        pytest.param({wellknown.LABEL_NODEPOOL: "ghost"}, id="nodepool-missing"),
        pytest.param({"karpenter.sh/registered": "true"}, id="registered"),
    ],
)
def test_a_hand_made_node_with_karpenter_labels_is_told_it_is_not_managed(
    labels: dict[str, str],
) -> None:
    world = World()
    world.server.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "hand-node", "labels": labels},
            "spec": {"providerID": "docker:////hand-node"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    )
    world.deploy()
    world.run(600)

    events = [e for e in world.events("NodeNotClaimed") if e.name == "hand-node"]
    assert len(events) == 1, "\n".join(map(str, world.events()))
    assert (events[0].kind, events[0].type) == ("Node", "Warning")
    message = events[0].message
    assert "no NodeClaim holds it" in message, message
    assert "docker:////hand-node" in message, message
    assert "remove the karpenter.sh/ labels" in message, message
    assert len(world.running("web")) == 2
    assert world.replicas("m-2x-amd64-zone-a-on-demand") >= 1


def test_a_hand_made_nodeclaim_no_instance_type_meets_is_given_up_naming_the_requirement() -> None:
    world = World()
    arch = {"key": wellknown.LABEL_ARCH, "operator": "In", "values": ["s390x"]}
    _nodeclaim(world, "hand", {wellknown.LABEL_NODEPOOL: NODEPOOL}, requirements=[arch])
    world.deploy()
    world.run()

    event = world.event_about("insufficient capacity", "kubernetes.io/arch In [s390x]")
    assert (event.kind, event.name, event.type) == ("NodeClaim", "hand", "Warning")
    assert "hand" not in [c["metadata"]["name"] for c in world.nodeclaims()]
    world.assert_good_resource_served()


def _machines(world: World) -> list[dict[str, Any]]:
    return [
        m
        for m in world.server.list(MACHINES.with_version("v1beta2"), NAMESPACE).items
        if not m["metadata"].get("deletionTimestamp")
    ]


def test_an_invalid_nodeclaim_upstream_launched_is_marked_and_gives_its_machine_back() -> None:
    """``expireAfter: 99999999999h`` admitted by upstream's CRDs, on a NodeClaim upstream
    Karpenter launched (finalizer on, a Machine of the good MachineDeployment bound to it):
    marked on itself, and deleting it gives the Machine and its replica back."""
    world = World()
    world.server.apply_manifests([nodeclaim_crd_without_duration_bounds()])
    md = resource("MachineDeployment")
    world.server.patch(md, GOOD, {"spec": {"replicas": 1}}, NAMESPACE)
    world.sim.driver.run_until_quiet()
    (machine,) = _machines(world)
    name = machine["metadata"]["name"]
    world.server.patch(
        MACHINES.with_version("v1beta2"),
        name,
        {"metadata": {"annotations": {ANNOTATION_NODECLAIM: "hand"}}},
        NAMESPACE,
    )
    world.server.create(
        NODECLAIMS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": "hand",
                "labels": {wellknown.LABEL_NODEPOOL: NODEPOOL},
                "annotations": {ANNOTATION_MACHINE: f"{NAMESPACE}/{name}"},
                "finalizers": [wellknown.FINALIZER_TERMINATION],
            },
            "spec": {
                "nodeClassRef": NODECLASS_REF,
                "requirements": [],
                "expireAfter": "99999999999h",
            },
        },
    )
    world.deploy()
    world.run()

    ready = world.condition(NODECLAIMS, "hand", "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidNodeClaim"), ready
    assert "spec.expireAfter" in ready["message"]
    assert "2562047h47m16s" in ready["message"]
    event = world.event_about("spec.expireAfter", "delete this NodeClaim")
    assert (event.kind, event.name, event.type) == ("NodeClaim", "hand", "Warning")
    assert len(world.running("web")) == 2

    world.server.delete(NODECLAIMS, "hand")
    world.run(60)

    assert "hand" not in [c["metadata"]["name"] for c in world.nodeclaims()]
    assert name not in [m["metadata"]["name"] for m in _machines(world)]
    world.assert_good_resource_served()


def test_explain_names_an_invalid_nodeclaim_as_its_condition_does() -> None:
    world = World()
    world.server.apply_manifests([nodeclaim_crd_without_duration_bounds()])
    _nodeclaim(
        world, "hand", {wellknown.LABEL_NODEPOOL: NODEPOOL}, terminationGracePeriod="99999999999h"
    )
    world.run(10)
    ready = world.condition(NODECLAIMS, "hand", "Ready")
    environment = PluginEnvironment(
        workload=world.server,
        management=world.server,
        clock=world.clock,
        dry_run=True,
        logger=logging.getLogger("karpenter_capi.plugins"),
    )

    result = explain(world.server, Plugins.load(["generic_capi"], environment), world.clock)
    out = io.StringIO()
    result.write_text(out)

    assert f"NodeClaim hand: {ready['message']}" in out.getvalue(), out.getvalue()
    assert result.as_dict()["invalidNodeClaims"] == {"hand": ready["message"]}
