"""A NodeClaim the controller's model refuses, next to good ones, through the whole operator.

Upstream's CRDs admit ``expireAfter: 99999999999h`` (a pattern, no bound); a NodeClaim carrying
it (hand-made, or written by upstream Karpenter before a switch) cannot become the model every
controller works on. It must be told so on itself, once, and must still go away cleanly when it
is deleted: its machine released through the plugin from what can be read (name, providerID,
labels, annotations), its finalizer removed. The rest of the cluster keeps being served.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES
from tests.core.operator.test_operator_lifecycles import World, condition, new_world
from tests.support import operator_world
from tests.support.provider import INSTANCE_ANNOTATION

FINALIZER = wellknown.FINALIZER_TERMINATION
BAD = {"expireAfter": "99999999999h", "terminationGracePeriod": "99999999999h"}


def _invalid_world() -> World:
    world = new_world()
    world.api.apply_manifests([operator_world.nodeclaim_crd_without_duration_bounds()])
    return world


def _bad_nodeclaim(world: World, name: str, instance: str, **spec: Any) -> None:
    """A NodeClaim upstream Karpenter launched: finalizer, its machine's annotation."""
    world.api.create(
        NODECLAIMS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": name,
                "labels": {wellknown.LABEL_NODEPOOL: "general"},
                "annotations": {INSTANCE_ANNOTATION: instance},
                "finalizers": [FINALIZER],
            },
            "spec": {
                "nodeClassRef": operator_world.NODECLASS_REF,
                "requirements": [],
                **spec,
            },
        },
    )


@pytest.mark.parametrize("field", sorted(BAD))
def test_an_invalid_nodeclaim_is_marked_once_and_its_machine_released_when_deleted(
    field: str, caplog: pytest.LogCaptureFixture
) -> None:
    world = _invalid_world()
    machine = world.provider.add_instance(nodeclaim_name="hand")
    _bad_nodeclaim(world, "hand", machine.name, **{field: BAD[field]})
    caplog.set_level(logging.WARNING)

    world.driver.advance(5)
    world.nodeclaim("good")  # the rest keeps working next to it
    world.driver.advance(120)

    claim = world.get(NODECLAIMS, "hand")
    ready = condition(claim, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidNodeClaim"), ready
    assert f"spec.{field}" in ready["message"], ready["message"]
    assert "2562047h47m16s" in ready["message"], ready["message"]
    assert "delete" in ready["message"], ready["message"]
    assert ready["message"].count("'Never'") <= 1, ready["message"]
    (event,) = world.events("InvalidNodeClaim", name="hand")
    assert f"spec.{field}" in event["message"]
    warned = [r for r in caplog.records if "hand" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]
    assert all(r.exc_info is None for r in caplog.records)
    assert condition(world.get(NODECLAIMS, "good"), "Launched")["status"] == "True"

    world.api.delete(NODECLAIMS, "hand")
    world.driver.advance(30)

    assert world.find(NODECLAIMS, "hand") is None
    assert machine.name not in world.provider.instances
    assert world.provider.count("delete", "hand") >= 1


def test_the_node_of_an_invalid_nodeclaim_is_drained_and_its_machine_released() -> None:
    world = _invalid_world()
    machine = world.provider.add_instance(nodeclaim_name="hand")
    _bad_nodeclaim(world, "hand", machine.name, **BAD)
    world.api.patch(
        NODECLAIMS, "hand", {"status": {"providerID": machine.provider_id}}, subresource="status"
    )
    node = world.kubelet_joins("hand")
    world.api.patch(NODES, node, {"metadata": {"finalizers": [FINALIZER]}})
    world.driver.advance(5)

    world.api.delete(NODES, node)
    world.driver.advance(60)

    assert world.find(NODES, node) is None
    assert world.find(NODECLAIMS, "hand") is None
    assert machine.name not in world.provider.instances
