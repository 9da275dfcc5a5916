"""The endpoint as Prometheus and the kubelet see it: real HTTP on 127.0.0.1."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.observability import Metrics, ObservabilityServer


class Flags:
    """Probe answers a test flips between requests."""

    def __init__(self) -> None:
        self.ready = False
        self.healthy = True


def get(url: str) -> tuple[int, dict[str, str], str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), error.read().decode()


@pytest.fixture
def flags() -> Flags:
    return Flags()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(FakeClock())


@pytest.fixture
def server(metrics: Metrics, flags: Flags) -> Iterator[ObservabilityServer]:
    with ObservabilityServer(
        metrics, port=0, ready=lambda: flags.ready, healthy=lambda: flags.healthy
    ) as running:
        yield running


def test_metrics_scrape_parses_with_upstream_names(
    server: ObservabilityServer, metrics: Metrics
) -> None:
    metrics.nodeclaim_created("default")
    metrics.set_nodepool_usage("default", {"cpu": 3, "memory": 4e9})
    metrics.on_reconcile("provisioner", 0.5, None)

    status, headers, body = get(server.url + "/metrics")

    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    families = {family.name: family for family in text_string_to_metric_families(body)}
    created = families["karpenter_nodeclaims_created"]
    assert created.type == "counter"
    assert [(s.name, s.labels, s.value) for s in created.samples] == [
        (
            "karpenter_nodeclaims_created_total",
            {"reason": "provisioned", "nodepool": "default", "min_values_relaxed": "false"},
            1.0,
        )
    ]
    usage = {
        s.labels["resource_type"]: s.value for s in families["karpenter_nodepools_usage"].samples
    }
    assert usage == {"cpu": 3.0, "memory": 4e9}
    assert families["controller_runtime_reconcile_time_seconds"].type == "histogram"
    assert families["karpenter_pods_startup_duration_seconds"].type == "summary"


def test_query_strings_are_ignored(server: ObservabilityServer) -> None:
    status, _, body = get(server.url + "/metrics?name[]=workqueue_depth")

    assert status == 200
    assert "karpenter_nodeclaims_created_total" in body


def test_healthz_follows_the_callback(server: ObservabilityServer, flags: Flags) -> None:
    assert get(server.url + "/healthz")[::2] == (200, "ok\n")

    flags.healthy = False
    status, _, body = get(server.url + "/healthz")

    assert status == 500
    assert body == "unhealthy\n"


def test_readyz_follows_the_callback(server: ObservabilityServer, flags: Flags) -> None:
    status, _, body = get(server.url + "/readyz")
    assert (status, body) == (503, "not ready\n")

    flags.ready = True
    assert get(server.url + "/readyz")[::2] == (200, "ok\n")


def test_a_probe_callback_that_raises_fails_the_probe_not_the_server(metrics: Metrics) -> None:
    def broken() -> bool:
        raise RuntimeError("informer cache lost")

    with ObservabilityServer(metrics, port=0, ready=broken, healthy=broken) as server:
        status, _, body = get(server.url + "/readyz")
        assert status == 503
        assert body == "not ready: RuntimeError: informer cache lost\n"
        assert get(server.url + "/healthz")[0] == 500
        assert get(server.url + "/metrics")[0] == 200


def test_unknown_paths_are_404(server: ObservabilityServer) -> None:
    assert get(server.url + "/")[0] == 404
    assert get(server.url + "/metricsz")[0] == 404


def test_two_servers_serve_their_own_metrics() -> None:
    first, second = Metrics(FakeClock()), Metrics(FakeClock())
    first.node_created("default", zone="a")

    with (
        ObservabilityServer(first, port=0, ready=lambda: True) as one,
        ObservabilityServer(second, port=0, ready=lambda: True) as two,
    ):
        assert one.port != two.port
        assert (
            'karpenter_nodes_created_total{nodepool="default",zone="a"} 1.0'
            in get(one.url + "/metrics")[2]
        )
        assert "karpenter_nodes_created_total{" not in get(two.url + "/metrics")[2]


def test_lifecycle(metrics: Metrics) -> None:
    server = ObservabilityServer(metrics, port=0, ready=lambda: True)
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.port

    server.start()
    assert server.start() is server  # starting twice is harmless
    url = server.url
    assert url.startswith("http://127.0.0.1:")
    assert get(url + "/readyz")[0] == 200

    server.close()
    server.close()  # and so is closing twice
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/readyz", timeout=5)
