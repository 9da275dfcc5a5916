"""``karpenter-capi apiserver``: serve manifests, write a kubeconfig, stop on request."""

from __future__ import annotations

import io
import socket
import threading
from pathlib import Path

import pytest
import yaml

from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import CONFIGMAPS, CUSTOM_RESOURCE_DEFINITIONS, NAMESPACES
from karpenter_capi.sim.apiserver.serve import parse_listen, run_apiserver


class _Lines(io.StringIO):
    """Captures output and signals when the first line is complete."""

    def __init__(self) -> None:
        super().__init__()
        self.first_line = threading.Event()

    def write(self, text: str) -> int:
        written = super().write(text)
        if "\n" in self.getvalue():
            self.first_line.set()
        return written


def test_serves_manifests_and_writes_a_kubeconfig(tmp_path: Path) -> None:
    manifest = tmp_path / "objects.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: one, namespace: default}\n"
        "data: {a: '1'}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: two, namespace: default}\n"
    )
    kubeconfig = tmp_path / "out" / "kubeconfig"
    stop = threading.Event()
    out = _Lines()
    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(
            run_apiserver("127.0.0.1:0", kubeconfig, [manifest], stop=stop, out=out)
        ),
        daemon=True,
    )
    thread.start()
    assert out.first_line.wait(30)
    line = out.getvalue().strip()
    assert line.startswith("serving on http://127.0.0.1:")
    assert line.endswith(f", kubeconfig {kubeconfig}")
    with OfficialClient.from_kubeconfig(str(kubeconfig)) as client:
        assert client.get(CONFIGMAPS, "one", "default")["data"] == {"a": "1"}
        assert [c["metadata"]["name"] for c in client.list(CONFIGMAPS, "default").items] == [
            "one",
            "two",
        ]
        crds = {c["metadata"]["name"] for c in client.list(CUSTOM_RESOURCE_DEFINITIONS).items}
        # The project's own CRDs and Cluster API are registered before the manifests load.
        assert {"nodepools.karpenter.sh", "machinedeployments.cluster.x-k8s.io"} <= crds
        assert client.served_versions("cluster.x-k8s.io")[0] == "v1beta2"
    stop.set()
    thread.join(10)
    assert result == [0]


def test_bad_listen_and_missing_manifest_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_apiserver("no-port", None, [], stop=threading.Event()) == 2
    assert "expected HOST:PORT" in capsys.readouterr().err
    assert run_apiserver("127.0.0.1:0", None, [tmp_path / "missing.yaml"]) == 2
    assert "cannot read manifest" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g}\n", "no matches for kind"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Not_Valid}\n", "is invalid"),
    ],
)
def test_manifest_the_server_rejects_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: str, message: str
) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(document)
    assert run_apiserver("127.0.0.1:0", None, [manifest], stop=threading.Event()) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: manifest rejected: ")
    assert message in err
    assert err.count("\n") == 1


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")
def test_ipv6_listen_address_gives_a_bracketed_url_and_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    stop = threading.Event()
    out = _Lines()
    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(run_apiserver("[::1]:0", kubeconfig, [], stop=stop, out=out)),
        daemon=True,
    )
    thread.start()
    try:
        assert out.first_line.wait(30)
        url = out.getvalue().split()[2].rstrip(",")
        assert url.startswith("http://[::1]:")
        document = yaml.safe_load(kubeconfig.read_text())
        assert document["clusters"][0]["cluster"]["server"] == url
        with OfficialClient.from_kubeconfig(str(kubeconfig)) as client:
            names = [n["metadata"]["name"] for n in client.list(NAMESPACES).items]
        assert "default" in names
    finally:
        stop.set()
        thread.join(10)
    assert result == [0]


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen("[::1]:8080") == ("::1", 8080)
