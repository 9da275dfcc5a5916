"""The official client's requests sent straight to its connection pool (``_official_direct``):
the same requests on the wire as through ``ApiClient.call_api``, and the cases left to it."""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Callable
from pathlib import Path

import pytest
import urllib3
from kubernetes.client import ApiClient, Configuration

from karpenter_capi.core.kube import errors
from karpenter_capi.core.kube._official_direct import DirectPool
from karpenter_capi.core.kube.client import PatchType, Preconditions, PropagationPolicy
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import MACHINE_DEPLOYMENTS, NODES, PODS
from tests.core.kube.test_official_client import Script, Seen, stub  # noqa: F401

_CALLS: list[Callable[[OfficialClient], object]] = [
    lambda c: c.get(PODS, "web", "default"),
    lambda c: c.get(MACHINE_DEPLOYMENTS, "md", "capi", subresource="scale"),
    lambda c: c.list(NODES, label_selector="a=b,c!=d", limit=10, continue_token="n x"),
    lambda c: c.create(PODS, {"metadata": {"name": "web"}, "spec": {"x": "é"}}, "default"),
    lambda c: c.update(PODS, {"metadata": {"name": "web", "namespace": "default"}}),
    lambda c: c.patch(PODS, "web", {"status": {"a": 1}}, "default", subresource="status"),
    lambda c: c.patch(
        PODS, "w", [{"op": "add", "path": "/x", "value": 1}], "default", patch_type=PatchType.JSON
    ),
    lambda c: c.patch(PODS, "w", {"spec": {}}, "default", patch_type=PatchType.STRATEGIC),
    lambda c: c.delete(
        PODS,
        "web",
        "default",
        preconditions=Preconditions(uid="u"),
        propagation_policy=PropagationPolicy.FOREGROUND,
    ),
    lambda c: c.evict("web", "default", grace_period_seconds=3),
]


def test_the_direct_path_sends_what_the_official_client_sends(
    stub: tuple[Script, OfficialClient],  # noqa: F811
) -> None:
    script, client = stub
    assert client._direct is not None
    for call in _CALLS:
        call(client)
    direct = list(script.seen)
    script.seen.clear()
    client._direct = None
    for call in _CALLS:
        call(client)
    official = list(script.seen)
    assert len(direct) == len(official) == len(_CALLS)
    for ours, theirs in zip(direct, official, strict=True):
        # The same request; only the body's length differs: orjson writes the same JSON
        # document without json.dumps's spaces and escapes.
        mine, its = dataclasses.asdict(ours), dataclasses.asdict(theirs)
        for seen in (mine, its):
            seen["headers"].pop("content-length", None)
        assert mine == its


def test_a_redirect_goes_the_official_clients_way(
    stub: tuple[Script, OfficialClient],  # noqa: F811
) -> None:
    script, client = stub

    def answer(seen: Seen, _handler: object) -> tuple[int, dict[str, str], object]:
        if seen.path.startswith("/moved"):
            return 200, {}, {"kind": "Pod", "metadata": {"name": "moved"}}
        return 307, {"Location": "/moved" + seen.path}, {}

    script.answer = answer
    with pytest.raises(errors.ServiceUnavailable) as direct:
        client.get(PODS, "web", "default")
    # Sent directly (307), then by the official client (307), which ends as it always did: its
    # retries allow no redirect.
    assert [s.path.startswith("/moved") for s in script.seen] == [False, False]
    script.seen.clear()
    client._direct = None
    with pytest.raises(errors.ServiceUnavailable) as official:
        client.get(PODS, "web", "default")
    assert len(script.seen) == 1
    assert str(direct.value) == str(official.value)


def test_a_proxy_or_read_retries_keep_the_official_path() -> None:
    proxied = Configuration(host="https://10.0.0.1:6443")
    proxied.proxy = "http://proxy.example:3128"
    assert DirectPool.of(ApiClient(proxied)) is None
    retried = Configuration(host="https://10.0.0.1:6443")
    retried.client_go_retries = True  # type: ignore[attr-defined]
    assert DirectPool.of(ApiClient(retried)) is None
    prefixed = DirectPool.of(ApiClient(Configuration(host="https://h.example/k8s/clusters/c")))
    assert prefixed is not None
    assert prefixed._origin == "https://h.example"
    assert isinstance(ApiClient(Configuration()).rest_client.pool_manager, urllib3.PoolManager)


def test_the_direct_path_keeps_the_kubeconfigs_tls_settings(tmp_path: Path) -> None:
    # A real kube-apiserver is HTTPS with its own CA and, from kubeadm, client certificates:
    # the pool the direct path sends through must verify and present them as the official
    # client's own pool does (built from the same PoolManager, not a bare connection).
    ca, cert, key = (tmp_path / name for name in ("ca.crt", "client.crt", "client.key"))
    configuration = Configuration(host="https://10.0.0.1:6443")
    configuration.ssl_ca_cert = str(ca)
    configuration.cert_file = str(cert)
    configuration.key_file = str(key)
    configuration.tls_server_name = "kubernetes.default.svc"
    api_client = ApiClient(configuration)
    direct = DirectPool.of(api_client)
    assert direct is not None
    pool = direct._connection_pool()
    official = api_client.rest_client.pool_manager.connection_from_url("https://10.0.0.1:6443/")
    assert pool is official  # the very pool the official client's requests use
    assert isinstance(pool, urllib3.HTTPSConnectionPool)
    assert pool.cert_reqs == ssl.CERT_REQUIRED
    assert (pool.ca_certs, pool.cert_file, pool.key_file) == (str(ca), str(cert), str(key))
    assert pool.conn_kw["server_hostname"] == "kubernetes.default.svc"
