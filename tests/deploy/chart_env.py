"""Helpers for the tests of what `deploy/` installs: the Helm chart and the Kustomize tree.

The chart is rendered by Helm's own engine (helm-python-sdk binds Helm's Go library), never by
a stand-in, so what these tests see is what `helm install` would send. The rendered objects are
applied with the real `kubectl` to the in-memory API server over HTTP, and the controller's
container is checked by handing its args and environment to the real `karpenter-capi` parser
the way the kubelet would start it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig

helm = pytest.importorskip(
    "helm_python", reason="helm-python-sdk (a dev dependency: pip install --group dev) is missing"
)

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CHART_DIR = DEPLOY / "charts" / "karpenter-capi"
KUSTOMIZE_DIR = DEPLOY / "kustomize"
DEPLOY_CRDS = DEPLOY / "crds"
KUBECTL = shutil.which("kubectl")

RELEASE = "karpenter-capi"
NAMESPACE = "karpenter-capi"

# Labels Helm (and the chart's label helper) adds that Kustomize has no reason to.
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version")

# Every documented combination of values (docs/install.md), by name.
VALUES_COMBINATIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "management-kubeconfig-secret": {
        "managementCluster": {
            "mode": "kubeconfigSecret",
            "kubeconfigSecret": {"name": "management-kubeconfig", "context": "mgmt-admin"},
        }
    },
    "management-url-token": {
        "managementCluster": {
            "mode": "urlToken",
            "urlToken": {
                "url": "https://management.example.com:6443",
                "tokenSecret": {"name": "management-token"},
                "caDataKey": "ca.crt",
            },
        }
    },
    "aws": {
        "plugins": ["generic_capi", "capa"],
        "pluginOptions": {"capa": {"region": "eu-west-1", "max-pods": 58}},
        "aws": {"roleArn": "arn:aws:iam::111122223333:role/karpenter-capi"},
    },
    "azure": {
        "plugins": ["generic_capi", "capz"],
        "azure": {
            "workloadIdentity": {
                "enabled": True,
                "clientId": "11111111-2222-3333-4444-555555555555",
                "tenantId": "66666666-7777-8888-9999-000000000000",
            },
            "subscriptionId": "00000000-0000-0000-0000-000000000001",
        },
    },
    "service-monitor": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}, "interval": "30s"}
    },
    "crds-template": {"crds": {"template": True}},
    "fleet": {
        "fleet": {
            "enabled": True,
            "clusterSelector": "karpenter.cluster.x-k8s.io/fleet=on",
            "namespaces": ["default", "kube-public"],
        },
        "replicas": 3,
    },
    "workload-rbac": {
        "workloadRBAC": {"only": True, "subjects": [{"kind": "User", "name": "karpenter-capi"}]}
    },
    "extra-env-and-tuning": {
        "extraEnv": [
            {"name": "HTTPS_PROXY", "value": "http://proxy.internal:3128"},
            {
                "name": "NODE_NAME",
                "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
            },
        ],
        "extraArgs": ["--workers=8"],
        "featureGates": {"SpotToSpotConsolidation": True},
        "batchIdleDuration": 2.5,
        "batchMaxDuration": 30,
        "logLevel": "debug",
        "logFormat": "text",
        "dryRun": True,
        "leaderElection": {"namespace": "kube-system"},
        "replicas": 3,
    },
}

# The Secrets the combinations above refer to, as a user would create them before installing.
SECRETS: dict[str, dict[str, str]] = {
    "management-kubeconfig": {"kubeconfig": "(written by the test that reads it)"},
    "management-token": {
        "token": "management-bearer-token",
        "ca.crt": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    },
}


def load_documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    include_crds: bool = False,
) -> list[dict[str, Any]]:
    """The objects `helm install` would create (crds/ first when asked), NOTES.txt left out."""
    with helm.Chart.load(CHART_DIR) as chart:
        manifests = chart.render(
            dict(values or {}), name=release, namespace=namespace, is_install=True
        )
    objects: list[dict[str, Any]] = []
    if include_crds:
        objects.extend(chart_crds())
    for path in sorted(manifests):
        if not path.endswith("NOTES.txt"):
            objects.extend(load_documents(manifests[path]))
    return objects


def chart_crds() -> list[dict[str, Any]]:
    return [load_documents(p.read_text())[0] for p in sorted((CHART_DIR / "crds").glob("*.yaml"))]


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [
        o for o in objects if o["kind"] == kind and name in (None, o["metadata"].get("name"))
    ]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, got {len(matches)}"
    return matches[0]


def kinds(objects: list[dict[str, Any]]) -> set[str]:
    return {o["kind"] for o in objects}


def controller_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod = find(objects, "Deployment")["spec"]["template"]["spec"]
    containers: list[dict[str, Any]] = pod["containers"]
    assert [c["name"] for c in containers] == ["controller"]
    return containers[0]


def kubelet_environment(
    container: dict[str, Any], *, pod_namespace: str, node_name: str = "node-a"
) -> dict[str, str]:
    """The container's environment as the kubelet would resolve it from ``SECRETS``.

    A reference the kubelet could not resolve fails the test (the pod would not start), except
    a Secret key marked optional.
    """
    fields = {"metadata.namespace": pod_namespace, "spec.nodeName": node_name}
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    for var in container.get("env", []):
        source = var.get("valueFrom")
        if source is None:
            env[var["name"]] = str(var.get("value", ""))
        elif "fieldRef" in source:
            env[var["name"]] = fields[source["fieldRef"]["fieldPath"]]
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            data = SECRETS.get(ref["name"], {})
            if ref["key"] in data:
                env[var["name"]] = data[ref["key"]]
            else:
                assert ref.get("optional"), f"secret {ref['name']}/{ref['key']} does not exist"
        else:
            raise AssertionError(f"env {var['name']}: unexpected source {source}")
    return env


class Kubectl:
    """The real kubectl, with a kubeconfig for one in-memory API server and a private HOME."""

    def __init__(self, kubeconfig: Path, home: Path) -> None:
        assert KUBECTL is not None
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "KUBECONFIG": str(kubeconfig),
        }

    def __call__(self, *args: str, stdin: str | None = None, ok: bool = True) -> str:
        assert KUBECTL is not None
        done = subprocess.run(
            [KUBECTL, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
            check=False,
        )
        if ok and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done.stdout + ("" if ok else done.stderr)

    def apply(self, objects: list[dict[str, Any]]) -> str:
        return self("apply", "-f", "-", stdin=yaml.safe_dump_all(objects, sort_keys=False))


@contextmanager
def served_cluster(home: Path) -> Iterator[tuple[InMemoryAPIServer, Kubectl]]:
    """An API server with Cluster API registered but none of this project's CRDs: the CRDs
    must come from what is being installed, as on a fresh cluster."""
    server = InMemoryAPIServer()
    server.register_cluster_api()
    with HttpFront(server) as front:
        yield server, Kubectl(write_kubeconfig(front.url, home / "kubeconfig"), home)


def install_order(objects: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Batches in the order Helm installs them: CRDs (and Namespaces) first, so the rest finds
    its kinds served and its namespace there."""
    first = [o for o in objects if o["kind"] in ("CustomResourceDefinition", "Namespace")]
    rest = [o for o in objects if o not in first]
    return [batch for batch in (first, rest) if batch]


def service_monitor_crd() -> dict[str, Any]:
    """The Prometheus Operator's ServiceMonitor CRD, reduced to what an apply needs: a cluster
    that uses serviceMonitor.enabled has the operator's CRDs installed."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {
                "plural": "servicemonitors",
                "singular": "servicemonitor",
                "kind": "ServiceMonitor",
                "listKind": "ServiceMonitorList",
            },
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
                }
            ],
        },
    }
