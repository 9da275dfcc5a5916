"""A pod update or patch may not set, change or clear ``spec.nodeName``.

kube's ``ValidatePodUpdate`` (``pkg/apis/core/validation/validation.go``) compares the new spec
with the old once the few mutable fields (images, ``activeDeadlineSeconds``, added
tolerations, removed scheduling gates, a negative grace period set to 1) are put back: any
other difference, ``spec.nodeName`` included, is one ``spec: Forbidden`` error, a 422
``Invalid``. Binding is ``pods/binding``'s (or the ``bindings`` collection's); a pod created
with ``spec.nodeName`` (a DaemonSet's, a static pod's) is not refused.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from karpenter_capi.core.kube import PODS, JsonObject, PatchType
from karpenter_capi.core.kube.errors import Invalid
from karpenter_capi.sim.apiserver import InMemoryAPIServer

NS = "default"
RULE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


@pytest.fixture
def api() -> InMemoryAPIServer:
    return InMemoryAPIServer()


def _pod(api: InMemoryAPIServer, name: str = "web", **spec: Any) -> JsonObject:
    return api.create(
        PODS,
        {
            "metadata": {"name": name, "namespace": NS},
            "spec": {"containers": [{"name": "c", "image": "app"}], **spec},
        },
    )


def _assert_refused(refused: Invalid, name: str = "web") -> None:
    assert refused.code == 422
    assert refused.reason == "Invalid"
    assert refused.message == f'Pod "{name}" is invalid: spec: Forbidden: {RULE}'
    assert refused.details["causes"] == [
        {"reason": "FieldValueForbidden", "message": f"Forbidden: {RULE}", "field": "spec"}
    ]


def test_a_patch_may_not_bind_an_unbound_pod(api: InMemoryAPIServer) -> None:
    pod = _pod(api)
    for patch_type, patch in (
        (PatchType.MERGE, {"spec": {"nodeName": "n1"}}),
        (PatchType.STRATEGIC, {"spec": {"nodeName": "n1"}}),
        (PatchType.JSON, [{"op": "add", "path": "/spec/nodeName", "value": "n1"}]),
    ):
        with pytest.raises(Invalid) as refused:
            api.patch(PODS, "web", patch, NS, patch_type=patch_type)
        _assert_refused(refused.value)
    assert api.get(PODS, "web", NS) == pod


def test_an_update_may_not_bind_move_or_unbind_a_pod(api: InMemoryAPIServer) -> None:
    pod = _pod(api)
    with pytest.raises(Invalid) as refused:
        api.update(PODS, {**pod, "spec": {**pod["spec"], "nodeName": "n1"}})
    _assert_refused(refused.value)
    bound = _pod(api, "bound", nodeName="n1")  # created bound: allowed (a DaemonSet's pod)
    assert bound["spec"]["nodeName"] == "n1"
    for spec in ({**bound["spec"], "nodeName": "n2"}, {**bound["spec"], "nodeName": ""}):
        with pytest.raises(Invalid) as refused:
            api.update(PODS, {**bound, "spec": spec})
        _assert_refused(refused.value, "bound")
    without = {k: v for k, v in bound["spec"].items() if k != "nodeName"}
    with pytest.raises(Invalid):
        api.update(PODS, {**bound, "spec": without})
    with pytest.raises(Invalid):
        api.patch(PODS, "bound", {"spec": {"nodeName": None}}, NS)
    assert api.get(PODS, "bound", NS) == bound


def test_what_may_change_still_does(api: InMemoryAPIServer) -> None:
    bound = _pod(api, "bound", nodeName="n1")
    relabelled = api.update(
        PODS, {**bound, "metadata": {**bound["metadata"], "labels": {"app": "web"}}}
    )
    assert relabelled["spec"]["nodeName"] == "n1"
    moved_image = api.patch(
        PODS,
        "bound",
        {"spec": {"containers": [{"name": "c", "image": "app:2"}]}},
        NS,
        patch_type=PatchType.STRATEGIC,
    )
    assert moved_image["spec"]["containers"][0]["image"] == "app:2"
    _pod(api)
    # An empty name is no name (kube's Go struct cannot tell them apart): nothing changed.
    assert not api.patch(PODS, "web", {"spec": {"nodeName": ""}}, NS)["spec"].get("nodeName")


def test_the_official_client_is_refused_with_422(api: InMemoryAPIServer, core: CoreV1Api) -> None:
    pod = _pod(api)
    with pytest.raises(ApiException) as refused:
        core.patch_namespaced_pod("web", NS, {"spec": {"nodeName": "n1"}})
    assert refused.value.status == 422
    status = json.loads(refused.value.body)
    assert (status["kind"], status["status"], status["reason"], status["code"]) == (
        "Status",
        "Failure",
        "Invalid",
        422,
    )
    assert status["message"] == f'Pod "web" is invalid: spec: Forbidden: {RULE}'
    assert {k: v for k, v in status["details"].items() if k != "group"} == {
        "name": "web",
        "kind": "Pod",
        "causes": [
            {"reason": "FieldValueForbidden", "message": f"Forbidden: {RULE}", "field": "spec"}
        ],
    }
    current = core.read_namespaced_pod("web", NS)
    current.spec.node_name = "n1"
    with pytest.raises(ApiException) as replaced:
        core.replace_namespaced_pod("web", NS, current)
    assert replaced.value.status == 422
    assert api.get(PODS, "web", NS) == pod
