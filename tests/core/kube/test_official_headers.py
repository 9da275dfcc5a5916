"""The official client's request headers, built once per client (``RequestHeaders``), and its
request bodies, serialized by orjson: the same request as ``param_serialize`` and ``json.dumps``
make, for less CPU, with a rotated token still sent from the next request on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes.client import ApiClient, Configuration

from karpenter_capi.core.kube import errors
from karpenter_capi.core.kube._official_credentials import RequestHeaders
from karpenter_capi.core.kube._official_direct import DirectPool, _serialize
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import NAMESPACES
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront


def _api(token: str | None = None) -> ApiClient:
    configuration = Configuration(host="https://10.0.0.1:6443")
    if token is not None:
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
    api = ApiClient(configuration)
    api.user_agent = "karpenter-capi/test (replica-1)"
    return api


def _serialized(api: ApiClient, content_type: str | None) -> dict[str, str]:
    headers = {"Accept": "application/json"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    _method, _url, header_params, _body, _post = api.param_serialize(
        method="GET",
        resource_path="/api/v1/pods",
        header_params=headers,
        auth_settings=["BearerToken"],
    )
    return dict(header_params)


@pytest.mark.parametrize("token", ["abcdef0123456789", None])
@pytest.mark.parametrize("content_type", [None, "application/merge-patch+json"])
def test_the_headers_are_those_param_serialize_makes(
    token: str | None, content_type: str | None
) -> None:
    api = _api(token)
    api.cookie = "session=1" if token else None
    made = RequestHeaders(api)
    for _ in range(2):  # built, then kept
        assert made("application/json", content_type) == _serialized(api, content_type)


def test_a_changed_token_or_default_header_is_sent_from_the_next_request() -> None:
    api = _api("first-token-0123")
    made = RequestHeaders(api)
    first = made("application/json", None)
    assert first is not None
    assert first["authorization"] == "Bearer first-token-0123"
    first["authorization"] = "changed by a caller"  # each call hands out a copy
    api.configuration.api_key["BearerToken"] = "second-token-456"
    api.set_default_header("X-Extra", "1")
    again = made("application/json", None)
    assert again == _serialized(api, None)
    assert again is not None
    assert again["authorization"] == "Bearer second-token-456"


def test_a_header_that_is_not_a_string_goes_through_param_serialize() -> None:
    api = _api("abcdef0123456789")
    api.set_default_header("X-Count", 3)
    assert RequestHeaders(api)("application/json", None) is None


def test_a_token_rotated_in_its_file_is_sent_on_the_next_request(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first-token-0123\n")
    front = HttpFront(InMemoryAPIServer(), token="first-token-0123").start()
    try:
        client = OfficialClient.from_url(front.url, token_file=str(token))
        client.list(NAMESPACES)
        token.write_text("the-second-token-0456\n")  # another size: the file's stamp moves
        front.token = "the-second-token-0456"
        client.list(NAMESPACES)  # 401 had the old header been kept
        front.token = "a-third-token-not-in-the-file"
        with pytest.raises(errors.Unauthorized):
            client.list(NAMESPACES)
        client.close()
    finally:
        front.close()


def test_bodies_are_compact_json_and_what_orjson_refuses_goes_through_json_dumps() -> None:
    assert _serialize({"metadata": {"labels": {"a": "é"}}}) == (
        '{"metadata":{"labels":{"a":"é"}}}'.encode()
    )
    big = {"spec": {"replicas": 2**70}}
    assert json.loads(_serialize(big)) == big


def test_the_timeouts_kept_for_reuse_stay_few() -> None:
    pool = DirectPool.of(ApiClient(Configuration(host="http://127.0.0.1:1")))
    assert pool is not None
    request = pool._timeout((10.0, 60.0))
    assert pool._timeout((10.0, 60.0)) is request  # made once
    for seconds in range(500):  # every watch asks its own read timeout
        pool._timeout((10.0, 30.0 + seconds))
    assert len(pool._timeouts) <= 32
