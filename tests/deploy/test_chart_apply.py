"""The rendered chart applies with the real kubectl, CRDs first, as `helm install` would send it.

Each documented combination of values is installed into its own namespace of one in-memory API
server that starts without this project's CRDs, after the Secrets it refers to, so what kubectl
accepts and what the server stores is what a user's first install would meet. After the CRDs
are in, a NodePool and a ClusterAPINodeClass apply too: the CRDs serve their kinds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from karpenter_capi.sim.apiserver import InMemoryAPIServer

from .chart_env import (
    KUBECTL,
    SECRETS,
    VALUES_COMBINATIONS,
    Kubectl,
    controller_container,
    install_order,
    render,
    served_cluster,
    service_monitor_crd,
)

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on this machine"),
]

NODECLASS_AND_NODEPOOL = [
    {
        "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1",
        "kind": "ClusterAPINodeClass",
        "metadata": {"name": "default"},
        "spec": {},
    },
    {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.cluster.x-k8s.io",
                        "kind": "ClusterAPINodeClass",
                        "name": "default",
                    },
                    "requirements": [],
                }
            }
        },
    },
]


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[InMemoryAPIServer, Kubectl]]:
    with served_cluster(tmp_path_factory.mktemp("kubectl-home")) as served:
        yield served


def _namespace_and_secrets(namespace: str) -> list[dict[str, Any]]:
    """What a user creates before installing: the namespace, the Secrets the values name."""
    secrets = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": data,
        }
        for name, data in SECRETS.items()
    ]
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, *secrets]


@pytest.mark.parametrize("combination", sorted(VALUES_COMBINATIONS))
def test_the_chart_applies_with_kubectl(
    cluster: tuple[InMemoryAPIServer, Kubectl], combination: str, tmp_path: Path
) -> None:
    _server, kubectl = cluster
    namespace = f"kc-{combination}"
    values = VALUES_COMBINATIONS[combination]
    objects = render(values, release=namespace, namespace=namespace, include_crds=True)
    if values.get("crds", {}).get("template"):
        # `helm install --skip-crds`: the CRDs come from the templates alone.
        objects = [o for o in objects if "labels" in o["metadata"]]
    prerequisites = _namespace_and_secrets(namespace)
    if values.get("serviceMonitor", {}).get("enabled"):
        prerequisites.append(service_monitor_crd())
    kubectl.apply(prerequisites)

    for batch in install_order(objects):
        out = kubectl.apply(batch)
        for obj in batch:
            # The CRDs are shared by the installs into one cluster: the first creates them.
            verb = "" if obj["kind"] == "CustomResourceDefinition" else " created"
            assert f"{obj['metadata']['name']}{verb}" in out
    stored = json.loads(kubectl("get", "-f", "-", "-o", "json", stdin=yaml.safe_dump_all(objects)))
    assert len(stored["items"]) == len(objects)
    for obj, got in zip(objects, stored["items"], strict=True):
        assert (got["kind"], got["metadata"]["name"]) == (obj["kind"], obj["metadata"]["name"])
        assert got["metadata"].get("labels") == obj["metadata"].get("labels")
        if obj["kind"] == "Deployment":
            container = got["spec"]["template"]["spec"]["containers"][0]
            assert container["args"] == controller_container(objects)["args"]
            assert container["env"] == controller_container(objects)["env"]

    kubectl.apply(NODECLASS_AND_NODEPOOL)
    assert "nodepool.karpenter.sh/default" in kubectl("get", "nodepools", "-o", "name")
