"""What a client sees on the wire: paths, codes, Status bodies, discovery, Tables, chunked watch.

These talk raw HTTP (``http.client``) to the front, so they pin the bytes kubectl and the
official client depend on, independently of either client's behaviour.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from karpenter_capi.core.kube.resources import PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront, host_port

TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


class Wire:
    """A keep-alive HTTP/1.1 connection to the front, answering (status, headers, json)."""

    def __init__(self, front: HttpFront) -> None:
        self.front = front
        self.conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> tuple[int, http.client.HTTPMessage, Any]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": accept}
        if data is not None:
            headers["Content-Type"] = content_type
        self.conn.request(method, path, body=data, headers=headers)
        response = self.conn.getresponse()
        raw = response.read()
        ctype = response.headers.get("Content-Type", "")
        parsed = json.loads(raw) if raw and ctype.startswith("application/json") else raw
        return response.status, response.headers, parsed


@pytest.fixture
def front(apiserver: InMemoryAPIServer) -> Iterator[HttpFront]:
    with HttpFront(apiserver) as serving:
        yield serving


@pytest.fixture
def wire(front: HttpFront) -> Iterator[Wire]:
    client = Wire(front)
    yield client
    client.conn.close()


def _pod(name: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]},
    }


def test_front_serves_on_a_free_loopback_port(front: HttpFront) -> None:
    assert front.url == f"http://127.0.0.1:{front.port}"
    assert front.port > 0


def test_ipv6_hosts_are_bracketed_in_urls() -> None:
    assert host_port("::1", 6443) == "[::1]:6443"
    assert host_port("[::1]", 6443) == "[::1]:6443"
    assert host_port("127.0.0.1", 6443) == "127.0.0.1:6443"


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/livez"])
def test_health_endpoints(wire: Wire, path: str) -> None:
    status, _, body = wire.call("GET", path)
    assert (status, body) == (200, b"ok")


def test_version_looks_like_a_kube_apiserver(wire: Wire) -> None:
    status, _, body = wire.call("GET", "/version")
    assert status == 200
    assert body["gitVersion"] == "v1.31.0"
    assert (body["major"], body["minor"]) == ("1", "31")


def test_core_discovery(wire: Wire) -> None:
    status, _, versions = wire.call("GET", "/api")
    assert status == 200
    assert versions["kind"] == "APIVersions"
    assert versions["versions"] == ["v1"]

    status, _, resources = wire.call("GET", "/api/v1")
    assert status == 200
    assert resources["kind"] == "APIResourceList"
    assert resources["groupVersion"] == "v1"
    by_name = {r["name"]: r for r in resources["resources"]}
    pods = by_name["pods"]
    assert pods["kind"] == "Pod"
    assert pods["namespaced"] is True
    assert pods["singularName"] == "pod"
    assert "po" in pods["shortNames"]
    assert {"create", "delete", "get", "list", "patch", "update", "watch"} <= set(pods["verbs"])
    assert by_name["pods/status"]["verbs"] == ["get", "patch", "update"]
    eviction = by_name["pods/eviction"]
    assert (eviction["group"], eviction["version"], eviction["kind"]) == (
        "policy",
        "v1",
        "Eviction",
    )
    binding = by_name["pods/binding"]
    assert (binding["kind"], binding["verbs"]) == ("Binding", ["create"])
    assert by_name["nodes"]["namespaced"] is False


def test_group_discovery_names_the_preferred_version(
    apiserver: InMemoryAPIServer, wire: Wire
) -> None:
    apiserver.register_cluster_api()
    status, _, groups = wire.call("GET", "/apis")
    assert status == 200
    assert groups["kind"] == "APIGroupList"
    capi = next(g for g in groups["groups"] if g["name"] == "cluster.x-k8s.io")
    preferred = apiserver.served_versions("cluster.x-k8s.io")[0]
    assert capi["preferredVersion"] == {
        "groupVersion": f"cluster.x-k8s.io/{preferred}",
        "version": preferred,
    }
    assert capi["versions"][0]["version"] == preferred

    status, _, resources = wire.call("GET", f"/apis/cluster.x-k8s.io/{preferred}")
    assert status == 200
    scale = next(r for r in resources["resources"] if r["name"] == "machinedeployments/scale")
    assert (scale["group"], scale["version"], scale["kind"]) == ("autoscaling", "v1", "Scale")


def test_unknown_group_version_is_404(wire: Wire) -> None:
    status, _, body = wire.call("GET", "/apis/nope.example.com/v1")
    assert status == 404
    assert body["kind"] == "Status"


def test_create_answers_201_and_conflicts_answer_409_status(wire: Wire) -> None:
    status, _, created = wire.call("POST", "/api/v1/namespaces/default/pods", _pod("web"))
    assert status == 201
    assert created["metadata"]["uid"]
    assert created["metadata"]["resourceVersion"]

    status, _, body = wire.call("POST", "/api/v1/namespaces/default/pods", _pod("web"))
    assert status == 409
    assert body["kind"] == "Status"
    assert body["status"] == "Failure"
    assert body["reason"] == "AlreadyExists"
    assert body["code"] == 409


def test_missing_object_is_404_status(wire: Wire) -> None:
    status, _, body = wire.call("GET", "/api/v1/namespaces/default/pods/ghost")
    assert status == 404
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "NotFound", 404)


def test_namespace_in_body_must_match_the_path(wire: Wire) -> None:
    status, _, body = wire.call("POST", "/api/v1/namespaces/default/pods", _pod("x", "other"))
    assert status == 400
    assert "does not match" in body["message"]


def test_lists_in_one_namespace_and_across_all(apiserver: InMemoryAPIServer, wire: Wire) -> None:
    apiserver.create(PODS, _pod("a", "default", app="web"))
    apiserver.create(PODS, _pod("b", "default", app="db"))
    apiserver.create(PODS, _pod("c", "kube-system", app="web"))

    _, _, in_default = wire.call("GET", "/api/v1/namespaces/default/pods")
    assert in_default["kind"] == "PodList"
    assert sorted(p["metadata"]["name"] for p in in_default["items"]) == ["a", "b"]
    assert in_default["metadata"]["resourceVersion"]

    _, _, everywhere = wire.call("GET", "/api/v1/pods?labelSelector=app%3Dweb")
    assert sorted(p["metadata"]["name"] for p in everywhere["items"]) == ["a", "c"]


def test_paginated_list_hands_out_continue_tokens(apiserver: InMemoryAPIServer, wire: Wire) -> None:
    for i in range(5):
        apiserver.create(PODS, _pod(f"p{i}"))
    names: list[str] = []
    path = "/api/v1/namespaces/default/pods?limit=2"
    while True:
        _, _, page = wire.call("GET", path)
        names += [p["metadata"]["name"] for p in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
        path = f"/api/v1/namespaces/default/pods?limit=2&continue={token}"
    assert sorted(names) == [f"p{i}" for i in range(5)]


def test_merge_and_json_patch_by_content_type(apiserver: InMemoryAPIServer, wire: Wire) -> None:
    apiserver.create(PODS, _pod("web"))
    path = "/api/v1/namespaces/default/pods/web"
    status, _, merged = wire.call(
        "PATCH",
        path,
        {"metadata": {"labels": {"tier": "front"}}},
        content_type="application/merge-patch+json",
    )
    assert status == 200
    assert merged["metadata"]["labels"]["tier"] == "front"
    status, _, patched = wire.call(
        "PATCH",
        path,
        [{"op": "replace", "path": "/metadata/labels/tier", "value": "back"}],
        content_type="application/json-patch+json",
    )
    assert status == 200
    assert patched["metadata"]["labels"]["tier"] == "back"


def test_server_side_apply_is_refused_with_415(apiserver: InMemoryAPIServer, wire: Wire) -> None:
    apiserver.create(PODS, _pod("web"))
    status, _, body = wire.call(
        "PATCH",
        "/api/v1/namespaces/default/pods/web",
        _pod("web"),
        content_type="application/apply-patch+yaml",
    )
    assert status == 415
    assert body["reason"] == "UnsupportedMediaType"
    assert "server-side apply" in body["message"]


def test_dry_run_is_refused_rather_than_persisted(wire: Wire) -> None:
    status, _, body = wire.call("POST", "/api/v1/namespaces/default/pods?dryRun=All", _pod("x"))
    assert status == 400
    assert "dryRun" in body["message"]
    status, _, _ = wire.call("GET", "/api/v1/namespaces/default/pods/x")
    assert status == 404


_DRY_RUN_EVICTION = {
    "apiVersion": "policy/v1",
    "kind": "Eviction",
    "metadata": {"name": "web", "namespace": "default"},
    "deleteOptions": {"dryRun": ["All"]},
}
_WEB = "/api/v1/namespaces/default/pods/web"
_MERGE = "application/merge-patch+json"


@pytest.mark.parametrize(
    "request_",
    [
        # kubectl delete --dry-run=server sends DeleteOptions {"dryRun": ["All"]} in the body.
        ("DELETE", _WEB, {"kind": "DeleteOptions", "dryRun": ["All"]}, "application/json"),
        ("DELETE", f"{_WEB}?dryRun=All", None, "application/json"),
        ("DELETE", "/api/v1/namespaces/default/pods", {"dryRun": ["All"]}, "application/json"),
        ("DELETE", "/api/v1/namespaces/default/pods?dryRun=All", None, "application/json"),
        # kubectl drain --dry-run=server: the Eviction's deleteOptions.
        ("POST", f"{_WEB}/eviction", _DRY_RUN_EVICTION, "application/json"),
        ("PUT", f"{_WEB}?dryRun=All", _pod("web", tier="x"), "application/json"),
        ("PATCH", f"{_WEB}?dryRun=All", {"metadata": {"labels": {"tier": "x"}}}, _MERGE),
        ("POST", "/api/v1/namespaces/default/pods?dryRun=All", _pod("other"), "application/json"),
    ],
)
def test_dry_run_is_refused_wherever_it_is_asked(
    apiserver: InMemoryAPIServer, wire: Wire, request_: tuple[str, str, Any, str]
) -> None:
    before = apiserver.create(PODS, _pod("web"))
    method, path, body, content_type = request_

    status, _, reply = wire.call(method, path, body, content_type=content_type)

    assert status == 400
    assert reply["message"] == "dryRun is not supported by the simulated API server"
    assert [p["metadata"]["name"] for p in apiserver.list(PODS).items] == ["web"]
    assert apiserver.get(PODS, "web", "default") == before


def test_an_empty_dry_run_list_is_no_dry_run(apiserver: InMemoryAPIServer, wire: Wire) -> None:
    apiserver.create(PODS, _pod("web"))
    status, _, _ = wire.call("DELETE", _WEB, {"kind": "DeleteOptions", "dryRun": []})
    assert status == 200
    assert apiserver.list(PODS).items == []


def test_delete_answers_200_unless_a_legacy_cascade_is_pending(
    apiserver: InMemoryAPIServer, wire: Wire
) -> None:
    for name in ("gone", "held", "held-legacy", "gone-legacy"):
        pod = _pod(name)
        if name.startswith("held"):
            pod["metadata"]["finalizers"] = ["example.com/keep"]
        apiserver.create(PODS, pod)
    base = "/api/v1/namespaces/default/pods"
    legacy = {"kind": "DeleteOptions", "orphanDependents": False}

    status, _, gone = wire.call("DELETE", f"{base}/gone", {"kind": "DeleteOptions"})
    assert (status, gone["metadata"]["name"]) == (200, "gone")
    assert "deletionTimestamp" not in gone["metadata"]
    # Pending finalizers: kube-apiserver still answers 200, with the marked object...
    status, _, held = wire.call("DELETE", f"{base}/held", {"kind": "DeleteOptions"})
    assert status == 200
    assert held["metadata"]["deletionTimestamp"]
    # ...and 202 only when the cascade was asked for as orphanDependents: false.
    status, _, _ = wire.call("DELETE", f"{base}/held-legacy", legacy)
    assert status == 202
    status, _, _ = wire.call("DELETE", f"{base}/gone-legacy", legacy)
    assert status == 200


def test_delete_preconditions_in_the_body(apiserver: InMemoryAPIServer, wire: Wire) -> None:
    apiserver.create(PODS, _pod("web"))
    options = {"kind": "DeleteOptions", "preconditions": {"uid": "not-the-uid"}}
    status, _, body = wire.call("DELETE", "/api/v1/namespaces/default/pods/web", options)
    assert status == 409
    assert body["reason"] == "Conflict"
    status, _, _ = wire.call("DELETE", "/api/v1/namespaces/default/pods/web", {})
    assert status in (200, 202)


def test_delete_collection_by_label(apiserver: InMemoryAPIServer, wire: Wire) -> None:
    apiserver.create(PODS, _pod("a", app="web"))
    apiserver.create(PODS, _pod("b", app="db"))
    status, _, body = wire.call("DELETE", "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb")
    assert status == 200
    assert [p["metadata"]["name"] for p in body["items"]] == ["a"]
    remaining = apiserver.list(PODS, "default").items
    live = [p["metadata"]["name"] for p in remaining if not p["metadata"].get("deletionTimestamp")]
    assert live == ["b"]


def test_eviction_post_answers_201_success(apiserver: InMemoryAPIServer, wire: Wire) -> None:
    apiserver.create(PODS, _pod("web"))
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "web", "namespace": "default"},
    }
    status, _, body = wire.call("POST", "/api/v1/namespaces/default/pods/web/eviction", eviction)
    assert status == 201
    assert body["status"] == "Success"


def test_table_for_pods_has_kubectl_columns(apiserver: InMemoryAPIServer, wire: Wire) -> None:
    apiserver.create(PODS, _pod("web"))
    status, _, table = wire.call("GET", "/api/v1/namespaces/default/pods", accept=TABLE_ACCEPT)
    assert status == 200
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    columns = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]
    assert columns == ["Name", "Ready", "Status", "Restarts", "Age"]
    (row,) = table["rows"]
    assert row["cells"][:4] == ["web", "0/1", "Pending", 0]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["name"] == "web"


def test_table_evaluates_crd_printer_columns(apiserver: InMemoryAPIServer, wire: Wire) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                    "additionalPrinterColumns": [
                        {
                            "name": "Ready",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
                        },
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    ],
                }
            ],
        },
    }
    status, _, _ = wire.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert status == 201
    widget = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"size": 3},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    status, _, _ = wire.call("POST", "/apis/example.com/v1/widgets", widget)
    assert status == 201
    status, _, table = wire.call(
        "GET", "/apis/example.com/v1/widgets?includeObject=Object", accept=TABLE_ACCEPT
    )
    assert status == 200
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Ready", "Size", "Age"]
    (row,) = table["rows"]
    assert row["cells"][:3] == ["w1", "True", 3]
    assert row["object"]["spec"] == {"size": 3}


def _read_watch_line(response: http.client.HTTPResponse) -> dict[str, Any]:
    line = response.readline()
    assert line, "watch stream ended before an event arrived"
    parsed: dict[str, Any] = json.loads(line)
    return parsed


def test_watch_streams_chunked_events(apiserver: InMemoryAPIServer, front: HttpFront) -> None:
    rv = apiserver.list(PODS, "default").resource_version
    conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    conn.request("GET", f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}")
    response = conn.getresponse()
    assert response.status == 200
    assert response.headers["Transfer-Encoding"] == "chunked"
    creator = threading.Thread(target=lambda: apiserver.create(PODS, _pod("late")))
    creator.start()
    event = _read_watch_line(response)
    creator.join()
    assert event["type"] == "ADDED"
    assert event["object"]["metadata"]["name"] == "late"
    conn.close()


def test_watch_ends_after_timeout_seconds(front: HttpFront) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    conn.request("GET", "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1")
    response = conn.getresponse()
    assert response.read() == b""  # the chunked body ends cleanly, no events
    conn.close()


def test_watch_as_table_for_kubectl_get_w(apiserver: InMemoryAPIServer, front: HttpFront) -> None:
    apiserver.create(PODS, _pod("web"))
    conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    conn.request(
        "GET",
        "/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=5",
        headers={"Accept": TABLE_ACCEPT},
    )
    response = conn.getresponse()
    event = _read_watch_line(response)
    assert event["type"] == "ADDED"
    assert event["object"]["kind"] == "Table"
    assert event["object"]["rows"][0]["cells"][0] == "web"
    conn.close()


def test_injected_throttle_answers_429_with_retry_after(
    apiserver: InMemoryAPIServer, wire: Wire
) -> None:
    apiserver.create(PODS, _pod("web"))
    apiserver.faults.throttle("get", "pods", retry_after_seconds=5)
    status, headers, body = wire.call("GET", "/api/v1/namespaces/default/pods/web")
    assert status == 429
    assert headers["Retry-After"] == "5"
    assert body["reason"] == "TooManyRequests"
    assert body["details"]["retryAfterSeconds"] == 5
    status, _, _ = wire.call("GET", "/api/v1/namespaces/default/pods/web")
    assert status == 200  # the fault was for one request only


def test_adapter_keeps_retry_after_from_the_front(
    apiserver: InMemoryAPIServer, front: HttpFront
) -> None:
    from karpenter_capi.core.kube.errors import TooManyRequests
    from karpenter_capi.core.kube.official import OfficialClient

    apiserver.faults.throttle("list", "pods", retry_after_seconds=2)
    with OfficialClient.from_url(front.url) as client:
        with pytest.raises(TooManyRequests) as info:
            client.list(PODS, "default")
        assert info.value.retry_after_seconds == 2


def test_dropped_watches_end_the_http_stream(
    apiserver: InMemoryAPIServer, front: HttpFront
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    rv = apiserver.list(PODS, "default").resource_version
    conn.request("GET", f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}")
    response = conn.getresponse()
    assert response.status == 200
    apiserver.faults.drop_watches()
    assert response.read() == b""
    conn.close()


def test_calls_share_one_kept_alive_connection(wire: Wire) -> None:
    wire.call("GET", "/api/v1/namespaces/default/pods")
    first_socket = wire.conn.sock
    status, _, _ = wire.call("GET", "/api/v1/nodes")
    assert status == 200
    assert wire.conn.sock is first_socket


def test_unknown_patch_type_is_415(apiserver: InMemoryAPIServer, wire: Wire) -> None:
    apiserver.create(PODS, _pod("web"))
    status, _, body = wire.call(
        "PATCH", "/api/v1/namespaces/default/pods/web", {}, content_type="text/plain"
    )
    assert status == 415
    assert "application/merge-patch+json" in body["message"]


_WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer"}},
                            }
                        },
                    }
                },
            }
        ],
    },
}
_WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"


def _widget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def test_strict_field_validation_refuses_unknown_fields(
    apiserver: InMemoryAPIServer, wire: Wire
) -> None:
    apiserver.apply_manifests([_WIDGET_CRD])

    body = _widget("w", size=1, colour="red")
    body["metadata"]["colour"] = "red"
    status, _, reply = wire.call("POST", f"{_WIDGETS}?fieldValidation=Strict", body)
    assert status == 400
    assert reply["message"] == (
        'Widget in version "v1" cannot be handled as a Widget: strict decoding error: '
        'unknown field "metadata.colour", unknown field "spec.colour"'
    )
    assert apiserver.list(apiserver.resource("example.com", "v1", "widgets")).items == []

    status, _, _ = wire.call("POST", f"{_WIDGETS}?fieldValidation=Strict", _widget("w", size=1))
    assert status == 201
    status, _, reply = wire.call(
        "PATCH",
        f"{_WIDGETS}/w?fieldValidation=Strict",
        {"spec": {"shade": "dark"}},
        content_type=_MERGE,
    )
    assert status == 400
    assert reply["message"] == 'strict decoding error: unknown field "spec.shade"'


def test_field_validation_warns_by_default_and_ignore_is_silent(
    apiserver: InMemoryAPIServer, wire: Wire
) -> None:
    apiserver.apply_manifests([_WIDGET_CRD])

    status, headers, created = wire.call("POST", _WIDGETS, _widget("w1", size=1, colour="red"))
    assert status == 201
    assert created["spec"] == {"size": 1}  # pruned, as with Ignore
    assert headers.get_all("Warning") == ['299 - "unknown field \\"spec.colour\\""']

    status, headers, _ = wire.call(
        "POST", f"{_WIDGETS}?fieldValidation=Ignore", _widget("w2", size=1, colour="red")
    )
    assert status == 201
    assert headers.get_all("Warning") is None

    status, _, reply = wire.call("POST", f"{_WIDGETS}?fieldValidation=Loose", _widget("w3"))
    assert status == 422
    assert 'fieldValidation: Unsupported value: "Loose"' in reply["message"]


def test_openapi_v3_declares_server_side_field_validation(wire: Wire) -> None:
    status, _, root = wire.call("GET", "/openapi/v3")
    assert status == 200
    url = root["paths"]["api/v1"]["serverRelativeURL"]
    status, _, document = wire.call("GET", url)
    assert status == 200
    patch = document["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert any(p["name"] == "fieldValidation" for p in patch["parameters"])
    status, _, _ = wire.call("GET", "/openapi/v2")
    assert status == 404


def test_closing_the_front_ends_open_watches(apiserver: InMemoryAPIServer) -> None:
    front = HttpFront(apiserver).start()
    conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    conn.request("GET", "/api/v1/pods?watch=1&resourceVersion=0")
    response = conn.getresponse()
    assert response.status == 200
    front.close()
    with contextlib.suppress(http.client.IncompleteRead, ConnectionError):
        assert response.read() == b""
    conn.close()


def test_a_client_hanging_up_ends_its_quiet_watch(front: HttpFront) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    conn.request("GET", "/api/v1/pods?watch=1&resourceVersion=0")
    response = conn.getresponse()
    assert response.status == 200
    assert front.open_watches == 1
    response.close()
    conn.close()
    # No event will ever flow on this watch; the front must notice the hang-up by itself.
    deadline = time.monotonic() + 20
    while front.open_watches and time.monotonic() < deadline:
        time.sleep(0.05)
    assert front.open_watches == 0


def test_one_thread_watches_every_watch_for_hang_ups(front: HttpFront) -> None:
    conns = [http.client.HTTPConnection("127.0.0.1", front.port, timeout=10) for _ in range(3)]
    responses = []
    for conn in conns:
        conn.request("GET", "/api/v1/pods?watch=1&resourceVersion=0")
        responses.append(conn.getresponse())
    assert front.open_watches == 3
    monitors = [t for t in threading.enumerate() if t.name.startswith("watch-hangups")]
    assert len(monitors) == 1  # not one per watch
    responses[0].close()
    conns[0].close()
    deadline = time.monotonic() + 20
    while front.open_watches > 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert front.open_watches == 2  # the others stream on
    for response, conn in zip(responses[1:], conns[1:], strict=True):
        response.close()
        conn.close()
    while front.open_watches and time.monotonic() < deadline:
        time.sleep(0.05)
    assert front.open_watches == 0


def test_each_request_is_read_by_its_own_headers_in_any_case(
    apiserver: InMemoryAPIServer,
) -> None:
    """Headers are looked up case-insensitively, the first of a repeated one counting (as
    ``email.message.Message.get``), and afresh for each request of a kept-alive connection."""
    with HttpFront(apiserver, record_requests=True) as front:
        conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
        body = json.dumps(_pod("p")).encode()
        conn.putrequest("POST", "/api/v1/namespaces/default/pods", skip_accept_encoding=True)
        conn.putheader("user-agent", "first")
        conn.putheader("USER-AGENT", "repeated")
        conn.putheader("content-type", "application/json")
        conn.putheader("content-LENGTH", str(len(body)))
        conn.endheaders(body)
        created = conn.getresponse()
        assert created.status == 201, created.read()
        created.read()
        conn.request("GET", "/api/v1/namespaces/default/pods/p", headers={"User-Agent": "second"})
        got = conn.getresponse()
        assert json.loads(got.read())["metadata"]["name"] == "p"
        conn.request("GET", "/api/v1/namespaces/default/pods/p")
        conn.getresponse().read()
        conn.close()
        agents = [(r.method, r.agent) for r in front.requests]
    assert agents == [("POST", "first"), ("GET", "second"), ("GET", "")]  # none sent: ""
