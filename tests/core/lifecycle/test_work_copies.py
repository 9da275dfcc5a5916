"""The lifecycle's working copies: what a step changes never reaches the object read.

Why: a reconcile works on copies of the NodeClaim's status and of its Node (the informer cache
hands every reader the same objects), and shows the plugins the NodeClaim as it stands. Those
copies used ``copy.deepcopy``, a third of what a reconcile spent outside its requests; a
JSON copy (``work.json_copy``), and no copy at all for a model that is only validated, make
the same objects.
"""

from __future__ import annotations

import copy
from typing import Any

from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.lifecycle.registration import synced_node
from karpenter_capi.core.lifecycle.work import NodeClaimWork, json_copy

from .harness import Env

NOW = FakeClock().now()


def _status(raw: dict[str, Any]) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    raw["status"] = {
        "capacity": {"cpu": "2", "memory": "4Gi"},
        "allocatable": {"cpu": "1930m", "memory": "3Gi"},
        "conditions": [
            {
                "type": "Launched",
                "status": "True",
                "reason": "Launched",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    return raw


def test_json_copy_is_a_deep_copy_of_json() -> None:
    value = {"a": [1, {"b": "c", "d": [None, True, 2.5]}], "e": {}}
    copied = json_copy(value)
    assert copied == copy.deepcopy(value)
    copied["a"][1]["d"].append("x")
    copied["e"]["f"] = 1
    assert value == {"a": [1, {"b": "c", "d": [None, True, 2.5]}], "e": {}}


def test_a_step_changing_the_working_status_leaves_the_object_read_alone(env: Env) -> None:
    raw = _status(env.nodeclaim())
    before = copy.deepcopy(raw)
    work = NodeClaimWork.start(raw, NodeClaim.model_validate(raw), NOW)

    work.status["capacity"]["cpu"] = "8"
    work.status["providerID"] = "fake://node-a"

    assert raw == before
    patch = work.status_patch()
    assert patch["capacity"] == {"cpu": "8", "memory": "4Gi"}
    assert patch["providerID"] == "fake://node-a"


def test_the_model_shown_to_plugins_is_the_nodeclaim_with_the_steps_changes(env: Env) -> None:
    raw = _status(env.nodeclaim())
    before = copy.deepcopy(raw)
    work = NodeClaimWork.start(raw, NodeClaim.model_validate(raw), NOW)
    work.labels["example.com/zone"] = "zone-b"
    work.annotations["example.com/note"] = "launched"
    work.status["providerID"] = "fake://node-a"
    work.conditions.set_true("Registered")
    model = work.to_model()

    expected = copy.deepcopy(raw)
    expected["metadata"]["labels"] = dict(work.labels)
    expected["metadata"]["annotations"] = dict(work.annotations)
    expected["status"] = {**work.status, "conditions": work.conditions.to_json()}
    assert model == NodeClaim.model_validate(expected)
    assert model.metadata.labels["example.com/zone"] == "zone-b"
    assert model.status.provider_id == "fake://node-a"
    assert raw == before


def test_registration_syncs_a_copy_of_the_node(env: Env) -> None:
    raw = _status(env.nodeclaim())
    work = NodeClaimWork.start(raw, NodeClaim.model_validate(raw), NOW)
    node = env.node("node-a", "fake://node-a")
    before = copy.deepcopy(node)

    synced = synced_node(work, node)
    synced["status"]["allocatable"]["cpu"] = "1"
    synced["metadata"]["labels"]["example.com/x"] = "y"

    assert node == before
    assert synced["metadata"]["ownerReferences"][-1]["name"] == work.name
