"""Custom resources shaped like the fleet's, for ``apiserver_writes.py``'s CRD writes.

A NodePool, NodeClaims and Machines as a fleet cluster holds them (``simulate
scale-from-zero``'s, names and uids aside), and the writes the controller and the emulated
Cluster API make to them: NodeClaim annotation and status patches, NodePool status patches,
Machine annotation patches, NodeClaim creates.
"""

from __future__ import annotations

from typing import Any

JsonObject = dict[str, Any]

NS = "bench"
_PLAN = "karpenter.cluster.x-k8s.io/plan"
_NOMINATED = "karpenter.cluster.x-k8s.io/nominated-pods"


def _condition(kind: str, at: str, generation: int = 1) -> JsonObject:
    return {
        "type": kind,
        "status": "True",
        "reason": kind,
        "message": "",
        "lastTransitionTime": at,
        "observedGeneration": generation,
    }


def nodepool(index: int) -> JsonObject:
    """A NodePool as the fleet's catalog makes it (defaults left to the server)."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": f"catalog-{index}"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.cluster.x-k8s.io",
                        "kind": "ClusterAPINodeClass",
                        "name": "catalog",
                    },
                    "requirements": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": ["on-demand"],
                        },
                    ],
                    "expireAfter": "Never",
                }
            },
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "30s",
                "budgets": [{"nodes": "10%"}],
            },
        },
    }


def nodepool_status(attempt: int) -> JsonObject:
    """The NodePool controller's status patch: its conditions and what its nodes hold."""
    at = "2026-01-01T00:00:00Z"
    return {
        "status": {
            "conditions": [
                _condition(kind, at) for kind in ("ValidationSucceeded", "NodeClassReady", "Ready")
            ],
            "nodes": attempt,
            "resources": {
                "cpu": str(2 * attempt),
                "memory": f"{8 * attempt}Gi",
                "pods": str(110 * attempt),
                "ephemeral-storage": "0",
                "nodes": str(attempt),
            },
        }
    }


def nodeclaim(index: int) -> JsonObject:
    """A NodeClaim as the provisioner creates it (labels, plan annotations, requirements)."""
    pods = ",".join(f"default/web-5df5d6b8f9-{index:05d}{i}" for i in range(8))
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": f"catalog-{index:05d}",
            "labels": {
                "kubernetes.io/arch": "amd64",
                "karpenter.sh/capacity-type": "on-demand",
                "karpenter.sh/nodepool": "catalog-0",
                "node.kubernetes.io/instance-type": "s-8x-amd64-linux",
                "topology.kubernetes.io/zone": "zone-a",
            },
            "annotations": {
                "karpenter.sh/nodepool-hash": "524130450429748238",
                "karpenter.sh/nodepool-hash-version": "v3",
                _NOMINATED: pods,
                _PLAN: "35d81d3883784680/0/2",
                "karpenter.cluster.x-k8s.io/scalable-resource": (
                    "MachineDeployment/default/s-8x-amd64-zone-a-on-demand"
                ),
            },
            "finalizers": ["karpenter.sh/termination"],
        },
        "spec": {
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["catalog-0"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {
                    "key": "node.kubernetes.io/instance-type",
                    "operator": "In",
                    "values": ["m-8x-amd64-linux", "s-8x-amd64-linux"],
                },
            ],
            "resources": {"requests": {"cpu": "8", "memory": "28Gi", "pods": "8"}},
            "nodeClassRef": {
                "group": "karpenter.cluster.x-k8s.io",
                "kind": "ClusterAPINodeClass",
                "name": "catalog",
            },
            "expireAfter": "Never",
        },
    }


def nodeclaim_annotation(attempt: int) -> JsonObject:
    """A lifecycle annotation patch (the scalable resource asked for, the Machine chosen)."""
    return {
        "metadata": {
            "annotations": {
                "karpenter.cluster.x-k8s.io/scalable-resource-requested-at": (
                    f"2026-01-01T00:00:{attempt % 60:02d}Z"
                ),
                "cluster.x-k8s.io/machine": f"default/s-8x-amd64-zone-a-on-demand-{attempt}",
            }
        }
    }


def nodeclaim_status(index: int, attempt: int) -> JsonObject:
    """The lifecycle's status patch: capacity, the conditions so far, the provider id."""
    kinds = ("Launched", "Registered", "Initialized", "Ready")
    at = f"2026-01-01T00:{attempt % 60:02d}:11Z"
    machine = f"s-8x-amd64-zone-a-on-demand-xpcktzcbgx-{index:05d}"
    return {
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32668Mi", "pods": "110"},
            "conditions": [_condition(kind, at) for kind in kinds[: 1 + attempt % 4]],
            "providerID": f"sim://default/{machine}",
            "nodeName": machine,
        }
    }


def machine(index: int) -> JsonObject:
    """A Machine of a MachineSet, as the emulated Cluster API makes it (v1beta2)."""
    name = f"s-2x-amd64-zone-a-on-demand-xpcktzcbgx-{index:05d}"
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                "cluster.x-k8s.io/deployment-name": "s-2x-amd64-zone-a-on-demand",
                "node.kubernetes.io/instance-type": "s-2x-amd64-linux",
                "cluster.x-k8s.io/cluster-name": "sim",
                "machine-template-hash": "xpcktzcbgx",
                "cluster.x-k8s.io/set-name": "s-2x-amd64-zone-a-on-demand-xpcktzcbgx",
            },
            "annotations": {"sim.karpenter.cluster.x-k8s.io/api-shape": "v1beta2"},
            "finalizers": ["machine.cluster.x-k8s.io"],
        },
        "spec": {
            "clusterName": "sim",
            "version": "v1.31.0",
            "failureDomain": "zone-a",
            "bootstrap": {
                "configRef": {
                    "apiGroup": "bootstrap.cluster.x-k8s.io",
                    "kind": "KubeadmConfig",
                    "name": name,
                }
            },
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "DockerMachine",
                "name": name,
            },
            "providerID": f"sim://default/{name}",
        },
    }


def machine_annotation(index: int, attempt: int) -> JsonObject:
    """The controller's claim of a Machine: its NodeClaim's name and uid, a member label."""
    return {
        "metadata": {
            "labels": {"node.cluster.x-k8s.io/karpenter-member": ""},
            "annotations": {
                "karpenter.cluster.x-k8s.io/nodeclaim": f"catalog-{index:05d}",
                "karpenter.cluster.x-k8s.io/nodeclaim-uid": f"uid-{index}-{attempt}",
            },
        }
    }
