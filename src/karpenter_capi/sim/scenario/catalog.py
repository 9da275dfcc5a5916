"""Generate a Cluster API catalog like upstream Karpenter's kwok instance types.

Benchmarks need many instance types with predictable prices, and writing a MachineDeployment
per (shape, arch, zone, capacity type) by hand is hundreds of lines of YAML. Upstream's kwok
provider derives its catalog from a few lists (vCPU counts, memory per vCPU per family,
architectures, zones, capacity types) and a linear price (0.025 per vCPU + 0.001 per GiB,
spot at 0.7x); doing the same here makes scenarios comparable with upstream's perf tests. Each
MachineDeployment carries what ``generic_capi`` reads: the scale-from-zero capacity
annotations, the price annotation, ``failureDomain`` as the zone, the opt-in label, and the
min/max size annotations; one ClusterAPINodeClass selects them all, and one NodePool allows
every arch and capacity type of the catalog (plus any static NodePools the catalog names, on
the same NodeClass).
"""

from __future__ import annotations

import copy
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.plugins.generic_capi.shape import PRICE_ANNOTATION
from karpenter_capi.sim.scenario.schema import Catalog, StaticNodePool

POOL_LABEL: Final = "sim.karpenter-capi.io/catalog"
NAME: Final = "catalog"
_CA: Final = "capacity.cluster-autoscaler.kubernetes.io"
_SIZE: Final = "cluster.x-k8s.io/cluster-api-autoscaler-node-group"


def instance_type_name(family: str, cpu: int, arch: str) -> str:
    """Upstream kwok's naming: ``c-4x-amd64-linux``."""
    return f"{family}-{cpu}x-{arch}-linux"


def price(catalog: Catalog, cpu: int, memory_gib: int, capacity_type: str) -> float:
    on_demand = catalog.price_per_cpu * cpu + catalog.price_per_gib * memory_gib
    factor = catalog.spot_discount if capacity_type == wellknown.CAPACITY_TYPE_SPOT else 1.0
    return round(on_demand * factor, 6)


def _machine_deployment(
    catalog: Catalog, *, family: str, cpu: int, arch: str, zone: str, capacity_type: str
) -> dict[str, Any]:
    memory_gib = cpu * catalog.families[family]
    instance_type = instance_type_name(family, cpu, arch)
    name = f"{family}-{cpu}x-{arch}-{zone}-{capacity_type}"
    capacity_labels = f"kubernetes.io/arch={arch},{wellknown.LABEL_CAPACITY_TYPE}={capacity_type}"
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "namespace": catalog.namespace,
            "labels": {wellknown.LABEL_KARPENTER_MEMBER: "", POOL_LABEL: NAME},
            "annotations": {
                f"{_CA}/cpu": str(cpu),
                f"{_CA}/memory": f"{memory_gib}Gi",
                f"{_CA}/maxPods": str(catalog.max_pods),
                f"{_CA}/labels": capacity_labels,
                PRICE_ANNOTATION: f"{price(catalog, cpu, memory_gib, capacity_type):g}",
                f"{_SIZE}-min-size": "0",
                f"{_SIZE}-max-size": str(catalog.max_size),
            },
        },
        "spec": {
            "clusterName": catalog.cluster_name,
            "replicas": 0,
            "rollout": {"strategy": {"type": catalog.rollout_strategy}},
            "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": name}},
            "template": {
                "metadata": {
                    "labels": {
                        "cluster.x-k8s.io/deployment-name": name,
                        wellknown.LABEL_INSTANCE_TYPE: instance_type,
                    }
                },
                "spec": {
                    "clusterName": catalog.cluster_name,
                    "version": "v1.31.0",
                    "failureDomain": zone,
                    "bootstrap": {
                        "configRef": {
                            "apiGroup": "bootstrap.cluster.x-k8s.io",
                            "kind": "KubeadmConfigTemplate",
                            "name": f"{catalog.cluster_name}-workers",
                        }
                    },
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "DockerMachineTemplate",
                        "name": f"{catalog.cluster_name}-workers",
                    },
                },
            },
        },
    }


def generate_catalog(catalog: Catalog) -> list[dict[str, Any]]:
    """The Cluster, one MachineDeployment per combination, the NodeClass and the NodePool."""
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": catalog.cluster_name, "namespace": catalog.namespace},
            "spec": {
                "infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io",
                    "kind": "DockerCluster",
                    "name": catalog.cluster_name,
                }
            },
        }
    ]
    for family in catalog.families:
        for cpu in catalog.cpus:
            for arch in catalog.archs:
                for zone in catalog.zones:
                    for capacity_type in catalog.capacity_types:
                        objects.append(
                            _machine_deployment(
                                catalog,
                                family=family,
                                cpu=cpu,
                                arch=arch,
                                zone=zone,
                                capacity_type=capacity_type,
                            )
                        )
    objects.append(
        {
            "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1",
            "kind": "ClusterAPINodeClass",
            "metadata": {"name": NAME},
            "spec": {"scalableResourceSelector": {"matchLabels": {POOL_LABEL: NAME}}},
        }
    )
    nodepool: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": NAME},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.cluster.x-k8s.io",
                        "kind": "ClusterAPINodeClass",
                        "name": NAME,
                    },
                    "requirements": [
                        {
                            "key": "kubernetes.io/arch",
                            "operator": "In",
                            "values": list(catalog.archs),
                        },
                        {
                            "key": wellknown.LABEL_CAPACITY_TYPE,
                            "operator": "In",
                            "values": list(catalog.capacity_types),
                        },
                    ],
                    "expireAfter": catalog.expire_after,
                }
            },
            "disruption": {
                "consolidationPolicy": catalog.consolidation_policy,
                "consolidateAfter": catalog.consolidate_after,
            },
        },
    }
    if catalog.nodepool_limits:
        nodepool["spec"]["limits"] = dict(catalog.nodepool_limits)
    objects.append(nodepool)
    for static in catalog.static_nodepools:
        objects.append(_static_nodepool(nodepool, static))
    return objects


def _static_nodepool(dynamic: dict[str, Any], static: StaticNodePool) -> dict[str, Any]:
    """A static NodePool on the catalog NodePool's NodeClass and requirements."""
    template = copy.deepcopy(dynamic["spec"]["template"])
    template["metadata"] = {"labels": {"nodepool-type": "static"}}
    spec: dict[str, Any] = {
        "replicas": static.replicas,
        "template": template,
        "disruption": {"consolidateAfter": "0s"},
    }
    if static.limit_nodes is not None:
        spec["limits"] = {"nodes": str(static.limit_nodes)}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": static.name},
        "spec": spec,
    }
