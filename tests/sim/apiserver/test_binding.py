"""The ``pods/binding`` subresource: kube-scheduler's bind, one stored write.

kube's ``BindingREST`` (``pkg/registry/core/pod/storage/storage.go``: ``Create``,
``assignPod``, ``setPodNodeAndMetadata``) sets ``spec.nodeName`` and ``PodScheduled=True``
in the same update, clears the nomination, copies the Binding's annotations, and refuses with
409 a pod already bound, being deleted or gated, or one that fails the Binding's uid or
resourceVersion precondition.
"""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes.client import CoreV1Api, V1Binding, V1ObjectMeta
from kubernetes.client import V1ObjectReference as Ref
from kubernetes.client.exceptions import ApiException

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube import PODS, JsonObject
from karpenter_capi.core.kube.errors import (
    BadRequest,
    Conflict,
    InternalError,
    NotFound,
    ServiceUnavailable,
)
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.audit import AuditingClient, AuditLog, AuditRecord
from karpenter_capi.sim.apiserver.faulty_client import FaultyClient, unreachable
from karpenter_capi.sim.apiserver.http import HttpFront

NS = "default"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api(clock: FakeClock) -> InMemoryAPIServer:
    return InMemoryAPIServer(clock)


def _pod(api: InMemoryAPIServer, name: str = "web", **spec: Any) -> JsonObject:
    return api.create(
        PODS,
        {
            "metadata": {"name": name, "namespace": NS},
            "spec": {"containers": [{"name": "c", "image": "app"}], **spec},
        },
    )


def _binding(name: str, node: str, **meta: Any) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": NS, **meta},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def test_a_binding_sets_the_node_and_the_condition_in_one_write(
    api: InMemoryAPIServer, clock: FakeClock
) -> None:
    pod = _pod(api)
    api.patch(
        PODS,
        "web",
        {
            "status": {
                "nominatedNodeName": "n2",
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
                ],
            }
        },
        NS,
        subresource="status",
    )
    before = api.get(PODS, "web", NS)
    version = before["metadata"]["resourceVersion"]
    clock.advance(5)
    api.bind(_binding("web", "n1", uid=pod["metadata"]["uid"], annotations={"a": "b"}), NS)

    events = list(api.watch(PODS, NS, resource_version=version, timeout_seconds=0))
    assert [e.type for e in events] == ["MODIFIED"]
    bound = api.get(PODS, "web", NS)
    assert events[0].object == bound
    assert (
        int(bound["metadata"]["resourceVersion"]) == int(version) + 1 == int(api.resource_version)
    )
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"] == {"a": "b"}
    assert "nominatedNodeName" not in bound["status"]
    # ``UpdatePodCondition``: replaced where it stood, reason gone, a new transition time.
    assert bound["status"]["conditions"] == [
        {"type": "Ready", "status": "False"},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"},
    ]
    assert api.requests.by_resource().get("create pods/binding") == 1


def test_a_bound_pod_is_refused_with_409(api: InMemoryAPIServer) -> None:
    _pod(api)
    api.bind(_binding("web", "n1"), NS)
    written = api.get(PODS, "web", NS)
    with pytest.raises(Conflict) as refused:
        api.bind(_binding("web", "n2"), NS)
    assert refused.value.message == (
        'Operation cannot be fulfilled on pods/binding "web": pod web is already assigned to '
        'node "n1"'
    )
    assert refused.value.details["kind"] == "pods/binding"
    assert api.get(PODS, "web", NS) == written


def test_a_pod_being_deleted_or_gated_is_refused(api: InMemoryAPIServer) -> None:
    api.create(
        PODS,
        {
            "metadata": {"name": "going", "namespace": NS, "finalizers": ["example.com/hold"]},
            "spec": {"containers": [{"name": "c", "image": "app"}]},
        },
    )
    api.delete(PODS, "going", NS)
    with pytest.raises(Conflict, match="pod going is being deleted, cannot be assigned"):
        api.bind(_binding("going", "n1"), NS)
    _pod(api, "gated", schedulingGates=[{"name": "example.com/wait"}])
    with pytest.raises(Conflict, match=r"pod gated has non-empty \.spec\.schedulingGates"):
        api.bind(_binding("gated", "n1"), NS)


def test_the_bindings_uid_and_resource_version_are_preconditions(
    api: InMemoryAPIServer,
) -> None:
    pod = _pod(api)
    version = pod["metadata"]["resourceVersion"]
    with pytest.raises(Conflict, match="Precondition failed: UID in precondition: other"):
        api.bind(_binding("web", "n1", uid="other"), NS)
    api.patch(PODS, "web", {"metadata": {"labels": {"x": "y"}}}, NS)
    with pytest.raises(
        Conflict, match=f"Precondition failed: ResourceVersion in precondition: {version},"
    ):
        api.bind(_binding("web", "n1", resourceVersion=version), NS)
    assert not api.get(PODS, "web", NS)["spec"].get("nodeName")
    api.bind(_binding("web", "n1", uid=pod["metadata"]["uid"]), NS)
    assert api.get(PODS, "web", NS)["spec"]["nodeName"] == "n1"


def test_malformed_bindings(api: InMemoryAPIServer) -> None:
    _pod(api)
    with pytest.raises(NotFound, match='pods "gone" not found'):
        api.bind(_binding("gone", "n1"), NS)
    with pytest.raises(InternalError, match=r"^target\.name: Required value$"):
        api.bind({"metadata": {"name": "web"}, "target": {}}, NS)
    with pytest.raises(InternalError, match=r'target\.kind: Unsupported value: "Pod"'):
        api.bind({"metadata": {"name": "web"}, "target": {"kind": "Pod", "name": "n1"}}, NS)
    with pytest.raises(BadRequest, match="name in URL does not match name in Binding object"):
        api.bind(_binding("web", "n1"), NS, "other")
    with pytest.raises(BadRequest, match="namespace of the provided object does not match"):
        api.bind(_binding("web", "n1"), "elsewhere")
    with pytest.raises(BadRequest, match=r"^Name parameter required\.$"):
        api.create_binding({"metadata": {}, "target": {"name": "n1"}}, NS)
    assert not api.get(PODS, "web", NS)["spec"].get("nodeName")


def test_wrapping_clients_bind_as_a_create_on_pods_binding(api: InMemoryAPIServer) -> None:
    _pod(api)
    _pod(api, "api")
    audited = AuditingClient(api, AuditLog())
    audited.bind(_binding("web", "n1"), NS)
    assert api.get(PODS, "web", NS)["spec"]["nodeName"] == "n1"
    assert audited.log.records() == [
        AuditRecord("workload", "create", "", "pods", "binding", NS, "web")
    ]
    cut_off = FaultyClient(api, lambda: unreachable("api.test"))
    with pytest.raises(ServiceUnavailable):
        cut_off.bind(_binding("api", "n1"), NS)
    assert not api.get(PODS, "api", NS)["spec"].get("nodeName")


def test_the_official_client_binds_over_http(api: InMemoryAPIServer, core: CoreV1Api) -> None:
    pod = _pod(api)
    body = V1Binding(
        metadata=V1ObjectMeta(name="web", namespace=NS, uid=pod["metadata"]["uid"]),
        target=Ref(api_version="v1", kind="Node", name="n1"),
    )
    # The answer is a Status (201), which kube's generated clients cannot read as the
    # V1Binding they declare: read it raw.
    answer = core.create_namespaced_pod_binding("web", NS, body, _preload_content=False)
    assert answer.status == 201
    assert answer.json()["status"] == "Success"
    bound = api.get(PODS, "web", NS)
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["status"]["conditions"][-1]["status"] == "True"
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod_binding("web", NS, body, _preload_content=False)
    assert refused.value.status == 409
    assert "is already assigned to node" in str(refused.value.body)


# The deprecated collection: kube's ``LegacyBindingREST`` (same storage.go), registered as
# ``bindings`` in ``pkg/registry/core/rest/storage_core.go``, takes the pod's name from the
# Binding's ``metadata.name`` and is otherwise ``BindingREST.Create``.


def _post(front_url: str, path: str, body: Any, method: str = "POST") -> tuple[int, JsonObject]:
    connection = http.client.HTTPConnection(urlsplit(front_url).netloc, timeout=10)
    try:
        connection.request(method, path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def test_the_official_client_binds_through_the_bindings_collection(
    api: InMemoryAPIServer, core: CoreV1Api
) -> None:
    _pod(api)
    body = V1Binding(
        metadata=V1ObjectMeta(name="web", annotations={"a": "b"}),
        target=Ref(api_version="v1", kind="Node", name="n1"),
    )
    answer = core.create_namespaced_binding(NS, body, _preload_content=False)
    assert answer.status == 201
    assert answer.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    bound = api.get(PODS, "web", NS)
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"] == {"a": "b"}
    assert bound["status"]["conditions"][-1]["type"] == "PodScheduled"
    # The request is a create on ``bindings``, not on ``pods/binding``.
    assert api.requests.by_resource().get("create bindings") == 1
    assert "create pods/binding" not in api.requests.by_resource()
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_binding(NS, body, _preload_content=False)
    assert refused.value.status == 409
    assert json.loads(refused.value.body)["message"] == (
        'Operation cannot be fulfilled on pods/binding "web": pod web is already assigned to '
        'node "n1"'
    )


def test_the_bindings_collection_refuses_as_kube_does(api: InMemoryAPIServer) -> None:
    _pod(api)
    target = {"kind": "Node", "name": "n1"}
    path = f"/api/v1/namespaces/{NS}/bindings"
    with HttpFront(api) as front:
        # No name: ``NamespaceKeyFunc``'s 400, after ``ValidatePodBinding``'s 500.
        status, answer = _post(front.url, path, {"metadata": {}, "target": target})
        assert (status, answer["reason"], answer["message"]) == (
            400,
            "BadRequest",
            "Name parameter required.",
        )
        status, answer = _post(front.url, path, {"metadata": {}, "target": {}})
        assert (status, answer["message"]) == (500, "target.name: Required value")
        status, answer = _post(
            front.url, path, {"metadata": {"name": "web", "namespace": "other"}, "target": target}
        )
        assert (status, answer["reason"]) == (400, "BadRequest")
        assert "does not match the namespace sent on the request" in answer["message"]
        status, answer = _post(front.url, path, {"metadata": {"name": "gone"}, "target": target})
        assert (status, answer["message"]) == (404, 'pods "gone" not found')
        # Only created: no list, no items, no cluster-wide collection.
        assert _post(front.url, path, None, method="GET")[0] == 405
        assert _post(front.url, f"{path}/web", {"metadata": {"name": "web"}})[0] == 404
        assert _post(front.url, "/api/v1/bindings", {"metadata": {"name": "web"}})[0] == 404
    assert not api.get(PODS, "web", NS)["spec"].get("nodeName")


def test_discovery_lists_the_bindings_collection(api: InMemoryAPIServer) -> None:
    with HttpFront(api) as front:
        status, listing = _post(front.url, "/api/v1", None, method="GET")
    assert status == 200
    names = [r["name"] for r in listing["resources"]]
    assert names[0] == "bindings"  # kube lists /api/v1 in name order
    assert listing["resources"][0] == {
        "name": "bindings",
        "singularName": "binding",
        "namespaced": True,
        "kind": "Binding",
        "verbs": ["create"],
    }
