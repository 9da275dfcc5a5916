"""The whole operator on a fake clock, against the in-memory API and the fake provider.

The operator tests (every controller wired, driven by the stepped runtime) start from the same
few objects: a ClusterAPINodeClass, a NodePool that points at it, pending pods, and an
``Operator`` that loads ``FakeProvider`` as its only plugin. Each test module says only how its
world differs; the object builders serve the plugins' worlds too.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.resources import PODS
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from tests.support.provider import FakeProvider

JsonObject = dict[str, Any]

NODECLASS_REF = {
    "group": wellknown.NODECLASS_GROUP,
    "kind": wellknown.NODECLASS_KIND,
    "name": "default",
}


def nodeclass(name: str = "default") -> JsonObject:
    """A ClusterAPINodeClass with an empty spec (the fake provider needs nothing from it)."""
    return {
        "apiVersion": wellknown.NODECLASS_API_VERSION,
        "kind": wellknown.NODECLASS_KIND,
        "metadata": {"name": name},
        "spec": {},
    }


def nodepool(
    name: str = "general",
    *,
    nodeclass: str = "default",
    template: JsonObject | None = None,
    **spec: Any,
) -> JsonObject:
    """A NodePool on ``nodeclass`` with no requirements; ``template`` adds to its template
    (``metadata``, and ``spec`` fields beside the NodeClass reference) and ``spec`` to the
    NodePool's own spec (``disruption``, ``replicas``, ``limits``)."""
    template = template or {}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                **template,
                "spec": {
                    "nodeClassRef": {**NODECLASS_REF, "name": nodeclass},
                    "requirements": [],
                    **(template.get("spec") or {}),
                },
            },
            **spec,
        },
    }


def pending_pod(api: KubeClient, name: str, cpu: str = "500m", memory: str | None = None) -> None:
    """A pod in ``default`` that kube-scheduler has marked unschedulable, as the provisioner
    looks for."""
    requests = {"cpu": cpu} if memory is None else {"cpu": cpu, "memory": memory}
    api.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "app", "resources": {"requests": requests}}]},
        },
        "default",
    )
    api.patch(
        PODS,
        name,
        {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            }
        },
        "default",
        subresource="status",
    )


def operator(
    api: InMemoryAPIServer, clock: FakeClock, provider: FakeProvider, dry_run: bool = False
) -> Operator:
    """Every controller, one cluster for workload and management, no leader election and no
    metrics endpoint."""
    return Operator(
        api,
        api,
        provider.plugins(api),
        clock,
        OperatorOptions(leader_elect=False, metrics_port=None, dry_run=dry_run),
    )


def nodeclaim_crd_without_duration_bounds() -> JsonObject:
    """The NodeClaim CRD as upstream Karpenter ships it: duration patterns, but no CEL bound,
    so ``expireAfter: 99999999999h`` is admitted (what this project's model refuses)."""
    from karpenter_capi.core.api.crds import generate_crds

    (crd,) = [c for c in generate_crds() if c["spec"]["names"]["kind"] == "NodeClaim"]
    for version in crd["spec"]["versions"]:
        fields = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        for name in ("expireAfter", "terminationGracePeriod"):
            fields[name].pop("x-kubernetes-validations", None)
    return dict(crd)
