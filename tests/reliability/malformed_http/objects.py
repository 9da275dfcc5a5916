"""The objects the catalogue applies, built as a user would write them.

Apart from the catalogue so that it reads as a list of cases, and so the harness and the
benchmark share one idea of where each kind lives (``RESOURCES``) and of the catalog world
the bad objects join: the ``sim`` Cluster, the ``sim-workers`` templates, the ``catalog``
NodeClass and NodePool of ``sim.scenario.catalog``.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    MACHINE_DEPLOYMENTS,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PODS,
)
from karpenter_capi.sim.scenario.catalog import NAME, POOL_LABEL
from tests.reliability.malformed.world import (
    BOOTSTRAP,
    INFRA,
    NAMESPACE,
    NODECLASS_REF,
    TEMPLATE,
)

CLUSTER: Final = "sim"
MAX_SIZE: Final = wellknown.ANNOTATION_AUTOSCALER_MAX_SIZE
RESOURCES: Final = {
    "NodePool": NODEPOOLS,
    "ClusterAPINodeClass": CLUSTER_API_NODE_CLASSES,
    "MachineDeployment": MACHINE_DEPLOYMENTS.with_version("v1beta2"),
    "Pod": PODS,
    "NodeClaim": NODECLAIMS,
    "Node": NODES,
}


def nodepool(name: str, template_spec: dict[str, Any], **spec: Any) -> JsonObject:
    """A NodePool on the catalog NodeClass (unless ``template_spec`` names another)."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {"nodeClassRef": dict(NODECLASS_REF), "requirements": []} | template_spec
            },
            **spec,
        },
    }


def nodeclass(name: str, spec: dict[str, Any], annotations: dict[str, str]) -> JsonObject:
    return {
        "apiVersion": wellknown.NODECLASS_API_VERSION,
        "kind": wellknown.NODECLASS_KIND,
        "metadata": {"name": name, "annotations": dict(annotations)},
        "spec": dict(spec),
    }


def machine_deployment(
    name: str,
    annotations: dict[str, str],
    *,
    cluster: str = CLUSTER,
    template_spec: dict[str, Any] | None = None,
) -> JsonObject:
    """An opted-in MachineDeployment the catalog NodeClass selects, shaped like the catalog's
    2-vCPU one (``annotations`` the catalog's, to be merged into)."""
    spec: dict[str, Any] = {
        "clusterName": cluster,
        "version": "v1.31.0",
        "failureDomain": "zone-a",
        "bootstrap": {
            "configRef": {"apiGroup": BOOTSTRAP, "kind": "KubeadmConfigTemplate", "name": TEMPLATE}
        },
        "infrastructureRef": {"apiGroup": INFRA, "kind": "DockerMachineTemplate", "name": TEMPLATE},
    }
    spec.update(template_spec or {})
    selector = {"malformed.test/owner": name}
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {wellknown.LABEL_KARPENTER_MEMBER: "", POOL_LABEL: NAME},
            "annotations": annotations,
        },
        "spec": {
            "clusterName": cluster,
            "replicas": 0,
            "rollout": {"strategy": {"type": "OnDelete"}},
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": dict(selector)}, "spec": spec},
        },
    }


def pod(name: str, spec: dict[str, Any]) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": copy.deepcopy(spec),
    }


def pod_spec(requests: dict[str, str], **spec: Any) -> dict[str, Any]:
    container = {"name": "app", "image": "pause", "resources": {"requests": requests}}
    return {"containers": [container], **spec}


def required(*expressions: dict[str, Any]) -> dict[str, Any]:
    terms = [{"matchExpressions": list(expressions)}]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }


def pinned_pod(pool: str) -> JsonObject:
    """A small pod for ``pool`` alone (the bad NodePool is used, as the workload would)."""
    spec = pod_spec({"cpu": "100m"}, nodeSelector={wellknown.LABEL_NODEPOOL: pool})
    return pod(f"pinned-{pool}", spec)


def nodeclaim(name: str, labels: dict[str, str], nodeclass_name: str = NAME) -> JsonObject:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeClassRef": {**NODECLASS_REF, "name": nodeclass_name},
            "requirements": [
                {"key": wellknown.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
            ],
            "resources": {"requests": {"cpu": "100m"}},
        },
    }


def node(name: str) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                wellknown.LABEL_NODEPOOL: NAME,
                wellknown.LABEL_REGISTERED: "true",
                wellknown.LABEL_HOSTNAME: name,
            },
        },
        "spec": {"providerID": f"docker:////{name}"},
    }
