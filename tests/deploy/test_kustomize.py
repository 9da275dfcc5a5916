"""The Kustomize base and overlays: `kubectl kustomize` renders them, kubectl applies them, and
each produces the objects the Helm chart renders for the equivalent values.

The equivalence is what lets docs/install.md describe one set of objects for both tools: same
kinds, names and namespaces, same bodies (container args, env, volumes, selectors, RBAC rules,
ServiceAccount annotations) once the labels each tool adds for its own bookkeeping are left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from karpenter_capi.sim.apiserver import InMemoryAPIServer

from .chart_env import (
    KUBECTL,
    KUSTOMIZE_DIR,
    NAMESPACE,
    RELEASE,
    Kubectl,
    install_order,
    load_documents,
    render,
    served_cluster,
)

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl (kustomize built in) is not installed"),
]

# Each Kustomize tree, and the Helm values that say the same (the overlays' comments say so too).
EQUIVALENT_VALUES: dict[str, dict[str, Any]] = {
    "base": {},
    "overlays/aws": {
        "plugins": ["generic_capi", "capa"],
        "aws": {"roleArn": "arn:aws:iam::111122223333:role/karpenter-capi"},
        "nativeLaunch": {"capa": True},
    },
    "overlays/azure": {
        "plugins": ["generic_capi", "capz"],
        "azure": {
            "workloadIdentity": {
                "enabled": True,
                "clientId": "00000000-0000-0000-0000-000000000000",
            }
        },
        "nativeLaunch": {"capz": True},
    },
    "overlays/separate-management-cluster": {
        "managementCluster": {
            "mode": "kubeconfigSecret",
            "kubeconfigSecret": {"name": "karpenter-capi-management-kubeconfig"},
        }
    },
}

# API groups of Cluster API objects: in the management cluster only.
CAPI_GROUPS = {
    "cluster.x-k8s.io",
    "infrastructure.cluster.x-k8s.io",
    "bootstrap.cluster.x-k8s.io",
    "controlplane.cluster.x-k8s.io",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[InMemoryAPIServer, Kubectl]]:
    with served_cluster(tmp_path) as served:
        yield served


def kustomize(kubectl: Kubectl, tree: str) -> list[dict[str, Any]]:
    return load_documents(kubectl("kustomize", str(KUSTOMIZE_DIR / tree)))


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def _without_labels(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k != "labels"}
    return {**obj, "metadata": meta}


@pytest.mark.parametrize("tree", sorted(EQUIVALENT_VALUES))
def test_kustomize_renders_what_the_chart_renders(
    cluster: tuple[InMemoryAPIServer, Kubectl], tree: str
) -> None:
    _server, kubectl = cluster
    built = kustomize(kubectl, tree)
    values = EQUIVALENT_VALUES[tree]
    charted = render(values, release=RELEASE, namespace=NAMESPACE, include_crds=True)
    namespaces = [o for o in built if o["kind"] == "Namespace"]
    assert [o["metadata"]["name"] for o in namespaces] == [NAMESPACE]
    built_by_key = {_key(o): _without_labels(o) for o in built if o["kind"] != "Namespace"}
    charted_by_key = {_key(o): _without_labels(o) for o in charted}
    assert sorted(built_by_key) == sorted(charted_by_key)
    for key, obj in charted_by_key.items():
        assert built_by_key[key] == obj, f"{tree}: {key} differs from the chart's"


@pytest.mark.parametrize("tree", sorted(EQUIVALENT_VALUES))
def test_kustomize_output_applies_with_kubectl(
    cluster: tuple[InMemoryAPIServer, Kubectl], tree: str
) -> None:
    _server, kubectl = cluster
    built = kustomize(kubectl, tree)
    first, rest = install_order(built)
    kubectl.apply(first)
    if tree.endswith("separate-management-cluster"):
        kubectl(
            "create", "secret", "generic", "karpenter-capi-management-kubeconfig",
            "-n", NAMESPACE, "--from-literal=kubeconfig=apiVersion: v1",
        )  # fmt: skip
    out = kubectl.apply(rest)
    for obj in rest:
        assert f"{obj['metadata']['name']} created" in out
    deployment = kubectl("get", "deployment", "karpenter-capi", "-n", NAMESPACE, "-o", "name")
    assert deployment.strip() == "deployment.apps/karpenter-capi"


def test_separate_management_cluster_grants_nothing_on_cluster_api_here(
    cluster: tuple[InMemoryAPIServer, Kubectl],
) -> None:
    _server, kubectl = cluster
    for obj in kustomize(kubectl, "overlays/separate-management-cluster"):
        for rule in obj.get("rules") or []:
            granted = set(rule.get("apiGroups") or []) & CAPI_GROUPS
            assert not granted, f"{obj['kind']} {obj['metadata']['name']} grants {granted}"
