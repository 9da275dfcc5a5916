"""Builders for the Cluster API objects the generic_capi inventory tests put in the in-memory API.

Objects are plain JSON, as a user would apply them; ``v1beta1=True`` writes the v1beta1 shapes
(``infrastructureRef`` with ``apiVersion`` and ``namespace``) where they differ from v1beta2.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.hookspecs import PluginContext
from karpenter_capi.core.kube.discovery import CapiResources, capi_resources
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster

P = wellknown.CAPACITY_ANNOTATION_PREFIX
PRICE = "karpenter.cluster.x-k8s.io/price"
MEMBER = {wellknown.LABEL_KARPENTER_MEMBER: ""}
INFRA = "infrastructure.cluster.x-k8s.io"


def new_env(
    options: Mapping[str, str] | None = None,
) -> tuple[InMemoryAPIServer, FakeClock, PluginContext, CapiResources]:
    clock = FakeClock()
    server = new_cluster(clock=clock)
    ctx = PluginContext(
        plugin_name="generic_capi",
        workload=server,
        management=server,
        clock=clock,
        logger=logging.getLogger("test.generic_capi"),
        options=dict(options or {}),
    )
    return server, clock, ctx, capi_resources(server, {})


def sized(cpu: str = "2", memory: str = "8Gi", **extra: str) -> dict[str, str]:
    """Scale-from-zero annotations for a node of ``cpu`` and ``memory`` (plus ``extra``)."""
    return {P + "cpu": cpu, P + "memory": memory, **extra}


def scalable(
    kind: str,
    name: str,
    *,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    replicas: int | None = 0,
    failure_domain: str | None = None,
    template_labels: Mapping[str, str] | None = None,
    template: str | None = None,
    template_kind: str = "DockerMachineTemplate",
    taints: list[dict[str, str]] | None = None,
    owner: str | None = None,
    v1beta1: bool = False,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    machine_spec: dict[str, Any] = {"clusterName": "prod", "version": "v1.31.0"}
    if failure_domain is not None:
        machine_spec["failureDomain"] = failure_domain
    if template is not None:
        machine_spec["infrastructureRef"] = (
            {
                "apiVersion": f"{INFRA}/v1beta1",
                "kind": template_kind,
                "name": template,
                "namespace": namespace,
            }
            if v1beta1
            else {"apiGroup": INFRA, "kind": template_kind, "name": template}
        )
    if taints is not None:
        machine_spec["taints"] = taints
    # CAPI's MachinePool, MachineDeployment and MachineSet webhooks require a bootstrap.
    machine_spec["bootstrap"] = {"dataSecretName": f"{name}-bootstrap"}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": dict(MEMBER if labels is None else labels),
        "annotations": dict(annotations or {}),
    }
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "MachineDeployment",
                "name": owner,
                "uid": f"uid-{owner}",
            }
        ]
    body: dict[str, Any] = {
        "clusterName": "prod",
        "template": {"metadata": {"labels": dict(template_labels or {})}, "spec": machine_spec},
        **(spec or {}),
    }
    if replicas is not None:
        body["replicas"] = replicas
    version = "v1beta1" if v1beta1 else "v1beta2"
    return {
        "apiVersion": f"cluster.x-k8s.io/{version}",
        "kind": kind,
        "metadata": metadata,
        "spec": body,
    }


def machine_template(
    name: str,
    *,
    kind: str = "DockerMachineTemplate",
    version: str = "v1beta1",
    namespace: str = "default",
    capacity: Mapping[str, Any] | None = None,
    architecture: str | None = None,
    operating_system: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if capacity is not None:
        status["capacity"] = dict(capacity)
    node_info = {
        key: value
        for key, value in (("architecture", architecture), ("operatingSystem", operating_system))
        if value is not None
    }
    if node_info:
        status["nodeInfo"] = node_info
    # CAPA's CRD requires the instance type (emulated from its schema), so an AWS template
    # names one, as every real one does; the status still says what the node will have.
    template_spec = {"instanceType": "m5.large"} if kind == "AWSMachineTemplate" else {}
    return {
        "apiVersion": f"{INFRA}/{version}",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"template": {"spec": template_spec}},
        "status": status,
    }


def nodeclass(
    name: str = "default",
    *,
    selector: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": wellknown.NODECLASS_API_VERSION,
        "kind": wellknown.NODECLASS_KIND,
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": {"scalableResourceSelector": dict(selector or {})},
    }


def add(server: InMemoryAPIServer, capi: CapiResources, *objects: dict[str, Any]) -> None:
    """Create scalable resources, NodeClasses and templates (templates keep their status)."""
    by_kind = {
        "MachineDeployment": capi.machine_deployments,
        "MachineSet": capi.machine_sets,
        "MachinePool": capi.machine_pools,
        wellknown.NODECLASS_KIND: CLUSTER_API_NODE_CLASSES,
    }
    for obj in objects:
        resource = by_kind.get(obj["kind"])
        if resource is None:
            server.apply_manifests([obj])
        else:
            server.create(resource.with_version(obj["apiVersion"].rpartition("/")[2]), obj)


def machine(name: str, deployment: str, node: str, capi: CapiResources) -> dict[str, Any]:
    """A MachineDeployment's Machine whose Node is ``node``."""
    return {
        "apiVersion": capi.machines.api_version,
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"cluster.x-k8s.io/deployment-name": deployment},
        },
        "spec": {"clusterName": "prod"},
        "status": {"nodeRef": {"name": node}},
    }
