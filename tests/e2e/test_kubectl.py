"""The real ``kubectl`` against the simulated API server's HTTP front.

A user's first contact with a simulated cluster is kubectl, and kubectl exercises the wire
harder than our own client: discovery, OpenAPI-gated validation, server-side Tables, strategic
merge patches from client-side apply, the scale subresource, chunked watches. Skipped when no
kubectl binary is installed.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import (
    CONFIGMAPS,
    MACHINE_DEPLOYMENTS,
    NODES,
    PODS,
    Resource,
)
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig

KUBECTL = shutil.which("kubectl")
REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on this machine"),
]

WIDGET_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Color, type: string, jsonPath: .spec.color}
    - {name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}
"""


class Kubectl:
    def __init__(self, kubeconfig: Path, home: Path) -> None:
        assert KUBECTL is not None
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "KUBECONFIG": str(kubeconfig),
        }

    def argv(self, *args: str) -> list[str]:
        assert KUBECTL is not None
        return [KUBECTL, *args]

    def __call__(self, *args: str, stdin: str | None = None, ok: bool = True) -> str:
        done = subprocess.run(
            self.argv(*args),
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
            check=False,
        )
        if ok and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done.stdout + (done.stderr if not ok else "")


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[InMemoryAPIServer, Kubectl]]:
    server = InMemoryAPIServer()
    server.register_cluster_api()
    home = tmp_path_factory.mktemp("kubectl-home")
    with HttpFront(server) as front:
        kubeconfig = write_kubeconfig(front.url, home / "kubeconfig")
        yield server, Kubectl(kubeconfig, home)


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _pod_yaml(name: str) -> str:
    return (
        f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels: {{app: web}}\n"
        "spec:\n  containers:\n  - {name: app, image: nginx}\n"
    )


def test_version_and_api_resources(cluster: tuple[InMemoryAPIServer, Kubectl]) -> None:
    _server, kubectl = cluster
    assert "Server Version: v1.31.0" in kubectl("version")
    resources = kubectl("api-resources")
    assert "machinedeployments" in resources
    assert "pods" in resources


def test_get_nodes_shows_status_roles_and_version(
    cluster: tuple[InMemoryAPIServer, Kubectl],
) -> None:
    server, kubectl = cluster
    server.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "node-a", "labels": {"node-role.kubernetes.io/worker": ""}},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": "v1.31.0"},
            },
        },
    )
    lines = kubectl("get", "nodes").splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    row = next(line.split() for line in lines if line.startswith("node-a"))
    assert row[1:3] == ["Ready", "worker"]
    assert row[-1] == "v1.31.0"
    assert "Name:               node-a" in kubectl("describe", "node", "node-a")


def test_create_get_describe_and_delete_a_pod(
    cluster: tuple[InMemoryAPIServer, Kubectl], tmp_path: Path
) -> None:
    server, kubectl = cluster
    manifest = _write(tmp_path, "pod.yaml", _pod_yaml("web-1"))
    assert "pod/web-1 created" in kubectl("create", "-f", manifest)
    assert server.get(PODS, "web-1", "default")["spec"]["containers"][0]["image"] == "nginx"
    lines = kubectl("get", "pods").splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert any(line.split()[:3] == ["web-1", "0/1", "Pending"] for line in lines[1:])
    described = kubectl("describe", "pod", "web-1")
    assert "Namespace:" in described
    assert "nginx" in described
    assert 'pod "web-1" deleted' in kubectl("delete", "pod", "web-1", "--wait=false")
    with pytest.raises(NotFound):
        server.get(PODS, "web-1", "default")
    assert "NotFound" in kubectl("get", "pod", "web-1", ok=False)


def test_client_side_apply_creates_then_updates(
    cluster: tuple[InMemoryAPIServer, Kubectl], tmp_path: Path
) -> None:
    server, kubectl = cluster
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: fast}\n"
    assert "configmap/settings created" in kubectl("apply", "-f", _write(tmp_path, "a.yaml", text))
    updated = text.replace("fast", "safe")
    out = kubectl("apply", "-f", _write(tmp_path, "b.yaml", updated))
    assert "configmap/settings configured" in out
    stored = server.get(CONFIGMAPS, "settings", "default")
    assert stored["data"] == {"mode": "safe"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in stored["metadata"]["annotations"]
    assert "unchanged" in kubectl("apply", "-f", _write(tmp_path, "c.yaml", updated))


def test_apply_a_crd_then_its_custom_resource(
    cluster: tuple[InMemoryAPIServer, Kubectl], tmp_path: Path
) -> None:
    server, kubectl = cluster
    out = kubectl("apply", "-f", _write(tmp_path, "crd.yaml", WIDGET_CRD))
    assert "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created" in out
    widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {color: blue}\n"
    assert "widget.example.com/w1 created" in kubectl(
        "apply", "-f", _write(tmp_path, "w.yaml", widget)
    )
    lines = kubectl("get", "widgets").splitlines()
    assert lines[0].split() == ["NAME", "COLOR", "READY", "AGE"]
    assert lines[1].split()[:2] == ["w1", "blue"]
    assert len(lines[1].split()) == 3  # no Ready condition yet: the cell is blank, as in kube
    widgets = Resource("example.com", "v1", "widgets", "Widget", True)
    status = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    server.patch(widgets, "w1", status, "default", subresource="status")
    assert kubectl("get", "widgets").splitlines()[1].split()[:3] == ["w1", "blue", "True"]
    changed = widget.replace("blue", "green")
    assert "configured" in kubectl("apply", "-f", _write(tmp_path, "w2.yaml", changed))
    assert kubectl("get", "wd", "w1", "-o", "jsonpath={.spec.color}") == "green"


@pytest.mark.skipif(
    not (REPO / "deploy" / "crds").is_dir(), reason="deploy/crds/ has not been generated yet"
)
def test_apply_the_project_crds(cluster: tuple[InMemoryAPIServer, Kubectl]) -> None:
    _server, kubectl = cluster
    out = kubectl("apply", "-f", str(REPO / "deploy" / "crds"))
    assert "nodepools.karpenter.sh" in out
    assert "No resources found" in kubectl("get", "nodepools", ok=False)


def test_label_annotate_and_patch(
    cluster: tuple[InMemoryAPIServer, Kubectl], tmp_path: Path
) -> None:
    server, kubectl = cluster
    kubectl("create", "-f", _write(tmp_path, "pod.yaml", _pod_yaml("web-2")))
    kubectl("label", "pod", "web-2", "tier=front")
    kubectl("annotate", "pod", "web-2", "owner=team-a")
    kubectl("patch", "pod", "web-2", "--type=merge", "-p", '{"metadata":{"labels":{"x":"1"}}}')
    kubectl(
        "patch",
        "pod",
        "web-2",
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/metadata/labels/tier","value":"back"}]',
    )
    metadata = server.get(PODS, "web-2", "default")["metadata"]
    assert metadata["labels"] == {"app": "web", "tier": "back", "x": "1"}
    assert metadata["annotations"]["owner"] == "team-a"
    assert "web-2" in kubectl("get", "pods", "-l", "tier=back", "-o", "name")


def test_scale_a_machine_deployment(cluster: tuple[InMemoryAPIServer, Kubectl]) -> None:
    server, kubectl = cluster
    version = server.served_versions("cluster.x-k8s.io")[0]
    deployments = MACHINE_DEPLOYMENTS.with_version(version)
    server.create(
        deployments,
        {
            "apiVersion": f"cluster.x-k8s.io/{version}",
            "kind": "MachineDeployment",
            "metadata": {"name": "workers", "namespace": "default"},
            "spec": {
                "clusterName": "demo",
                "replicas": 1,
                "selector": {"matchLabels": {"pool": "workers"}},
                "template": {
                    "metadata": {"labels": {"pool": "workers"}},
                    # CAPI's webhook requires a bootstrap.
                    "spec": {"clusterName": "demo", "bootstrap": {"dataSecretName": "boot"}},
                },
            },
        },
    )
    out = kubectl("scale", "machinedeployment/workers", "--replicas=3")
    assert "scaled" in out
    assert server.get(deployments, "workers", "default")["spec"]["replicas"] == 3


def test_get_watch_streams_a_change(cluster: tuple[InMemoryAPIServer, Kubectl]) -> None:
    server, kubectl = cluster
    kubectl("create", "namespace", "watch")
    server.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "watched-0", "namespace": "watch"},
            "spec": {"containers": [{"name": "app", "image": "nginx"}]},
        },
    )
    process = subprocess.Popen(
        kubectl.argv("get", "pods", "-n", "watch", "-w", "--request-timeout=60s"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=kubectl.env,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump(stream: Any) -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=pump, args=(process.stdout,), daemon=True).start()
    try:
        assert lines.get(timeout=30).split()[0] == "NAME"
        assert lines.get(timeout=30).split()[0] == "watched-0"
        server.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "watched-1", "namespace": "watch"},
                "spec": {"containers": [{"name": "app", "image": "nginx"}]},
            },
        )
        assert lines.get(timeout=30).split()[:3] == ["watched-1", "0/1", "Pending"]
    finally:
        process.kill()
        process.wait(timeout=10)


def test_server_dry_run_is_refused_and_changes_nothing(
    cluster: tuple[InMemoryAPIServer, Kubectl], tmp_path: Path
) -> None:
    server, kubectl = cluster
    kubectl("create", "namespace", "dry")
    server.create(NODES, {"metadata": {"name": "dry-node"}})
    pod = _pod_yaml("dry-1").replace("spec:\n", "spec:\n  nodeName: dry-node\n")
    kubectl("create", "-n", "dry", "-f", _write(tmp_path, "pod.yaml", pod))

    # kubectl sends the dry run in the DeleteOptions body for deletes and evictions.
    out = kubectl("delete", "pod", "dry-1", "-n", "dry", "--dry-run=server", ok=False)
    assert "dryRun is not supported by the simulated API server" in out
    out = kubectl("drain", "dry-node", "--dry-run=server", "--force", ok=False)
    assert "dryRun is not supported by the simulated API server" in out

    assert server.get(PODS, "dry-1", "dry")["metadata"].get("deletionTimestamp") is None
    assert not server.get(NODES, "dry-node").get("spec", {}).get("unschedulable")


GADGET_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
"""


def test_unknown_fields_of_custom_resources_follow_validate(
    cluster: tuple[InMemoryAPIServer, Kubectl], tmp_path: Path
) -> None:
    server, kubectl = cluster
    kubectl("apply", "-f", _write(tmp_path, "crd.yaml", GADGET_CRD))
    gadget = _write(
        tmp_path,
        "g.yaml",
        "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g1}\n"
        "spec: {size: 1, colour: red}\n",
    )
    # kubectl's default --validate=strict asks the server (fieldValidation=Strict).
    out = kubectl("create", "-f", gadget, ok=False)
    assert 'strict decoding error: unknown field "spec.colour"' in out
    out = kubectl("create", "-f", gadget, "--validate=warn", ok=False)
    assert "gadget.example.com/g1 created" in out
    assert 'Warning: unknown field "spec.colour"' in out
    gadgets = Resource("example.com", "v1", "gadgets", "Gadget", True)
    assert server.get(gadgets, "g1", "default")["spec"] == {"size": 1}
