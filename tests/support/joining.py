"""A NodeClaim's Node joining the cluster, at the stage of registration a test needs.

Provisioning tests make the Node a launched NodeClaim gets, then the NodeClaim naming it, to
see what the next round counts on it; three stages matter to them, and each test read the
same forty lines apart before.
"""

from __future__ import annotations

from typing import Literal

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES
from karpenter_capi.sim.apiserver import InMemoryAPIServer

Stage = Literal["kubelet", "registered", "initialized"]


def join_node(
    server: InMemoryAPIServer,
    claim_name: str,
    *,
    stage: Stage = "initialized",
    allocatable: dict[str, str] | None = None,
) -> str:
    """Create the claim's Node ``node-<claim>`` and write its name on the claim; return it.

    ``stage``: ``kubelet``, as the kubelet registers it (not Ready, tainted
    ``karpenter.sh/unregistered``, none of the claim's labels); ``registered``, as registration
    leaves it (the claim's labels, ``karpenter.sh/registered``, untainted, not Ready yet);
    ``initialized``, Ready with the claim's labels and ``karpenter.sh/initialized``.
    ``allocatable`` defaults to the claim's requests and 110 pods: full with the pods it was
    launched for and nothing more.
    """
    claim = server.get(NODECLAIMS, claim_name)
    node_name = f"node-{claim_name}"
    claim_labels = claim["metadata"]["labels"]
    labels: dict[str, str] = {wellknown.LABEL_HOSTNAME: node_name}
    taints: list[dict[str, str]] = []
    if stage == "kubelet":
        labels["kubernetes.io/os"] = "linux"
        taints = [{"key": wellknown.TAINT_UNREGISTERED_KEY, "effect": "NoExecute"}]
    elif stage == "registered":
        labels |= {"kubernetes.io/os": "linux", **claim_labels}
        labels[wellknown.LABEL_REGISTERED] = "true"
    else:
        labels = {**claim_labels, **labels, wellknown.LABEL_INITIALIZED: "true"}
    if allocatable is None:
        allocatable = {**claim["spec"]["resources"]["requests"], "pods": "110"}
    spec: dict[str, object] = {"providerID": f"test:///{claim_name}"}
    if taints:
        spec["taints"] = taints
    ready = "True" if stage == "initialized" else "False"
    server.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node_name, "labels": labels},
            "spec": spec,
            "status": {
                "conditions": [{"type": "Ready", "status": ready}],
                "allocatable": allocatable,
                "capacity": allocatable,
            },
        },
    )
    server.patch(
        NODECLAIMS,
        claim_name,
        {"status": {"nodeName": node_name, "providerID": f"test:///{claim_name}"}},
        subresource="status",
    )
    return node_name
