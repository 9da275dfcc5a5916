"""MachineDeployments and MachinePools a ClusterClass topology owns, and when not to scale them.

A Cluster built from a ClusterClass has its workers made by Cluster API's topology controller
(``exp/topology/desiredstate/desired_state.go``: ``computeMachineDeployment``,
``computeMachinePool``). Where ``spec.topology.workers.machineDeployments[].replicas`` (or
``machinePools[]``) is set, that controller writes it back after every change anyone else
makes, so a replica this plugin adds is taken away again and a launch would be retried forever
against it (cluster-api issue 7395 records the same for cluster-autoscaler). Where it is unset,
Cluster API documents that "an external entity (like cluster autoscaler) is responsible for the
management of this value", and the resource is scaled like any other.

So a selected resource labelled ``topology.cluster.x-k8s.io/owned`` whose worker (found by
``topology.cluster.x-k8s.io/deployment-name`` or ``pool-name`` in its Cluster's topology) sets
``replicas`` is left out with a ``ResourceProblem`` that names the exact field to remove; the
NodeClass's Ready condition lists it, and Events go on the NodeClass, the resource and the
Cluster (where the field lives). Both Cluster layouts keep ``workers`` under
``spec.topology`` (v1beta1 names the class ``spec.topology.class``, v1beta2
``spec.topology.classRef``), so one reader serves both. Opt-in labels and scale-from-zero
annotations set through the worker's ``metadata`` reach the resource through the topology
controller and are read from the resource as usual.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from karpenter_capi.plugin_api.karpenter import wellknown
from karpenter_capi.plugins.generic_capi.selection import (
    MACHINE_DEPLOYMENT,
    MACHINE_POOL,
    ClusterKey,
    ResourceProblem,
    Selection,
    problem_of,
)

LABEL_TOPOLOGY_OWNED: Final = "topology.cluster.x-k8s.io/owned"
LABEL_TOPOLOGY_DEPLOYMENT: Final = "topology.cluster.x-k8s.io/deployment-name"
LABEL_TOPOLOGY_POOL: Final = "topology.cluster.x-k8s.io/pool-name"
REASON_TOPOLOGY_MANAGED_REPLICAS: Final = "TopologyManagedReplicas"

# kind -> (the label naming its worker, the list of workers in spec.topology.workers)
_WORKERS: Final = {
    MACHINE_DEPLOYMENT: (LABEL_TOPOLOGY_DEPLOYMENT, "machineDeployments"),
    MACHINE_POOL: (LABEL_TOPOLOGY_POOL, "machinePools"),
}


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _worker(cluster: Mapping[str, Any], field: str, name: str) -> Mapping[str, Any] | None:
    topology = (cluster.get("spec") or {}).get("topology")
    workers = ((topology or {}).get("workers") or {}) if isinstance(topology, Mapping) else {}
    for worker in (workers.get(field) if isinstance(workers, Mapping) else None) or []:
        if isinstance(worker, Mapping) and worker.get("name") == name:
            return worker
    return None


def topology_replicas_problem(
    kind: str, obj: Mapping[str, Any], clusters: Mapping[ClusterKey, Mapping[str, Any]]
) -> ResourceProblem | None:
    """Why ``obj`` must not be scaled because its Cluster's topology sets its replicas, or
    ``None`` (not topology-owned, or the topology leaves ``replicas`` to others)."""
    if kind not in _WORKERS:
        return None
    label, field = _WORKERS[kind]
    meta = _meta(obj)
    labels = meta.get("labels") or {}
    worker_name = labels.get(label)
    if LABEL_TOPOLOGY_OWNED not in labels or not worker_name:
        return None
    namespace = str(meta.get("namespace") or "")
    cluster_name = str(
        labels.get(wellknown.LABEL_CAPI_CLUSTER_NAME)
        or (obj.get("spec") or {}).get("clusterName")
        or ""
    )
    cluster = clusters.get((namespace, cluster_name))
    worker = _worker(cluster, field, str(worker_name)) if cluster is not None else None
    if worker is None or worker.get("replicas") is None:
        return None
    path = f"spec.topology.workers.{field}[name={worker_name}].replicas"
    problem = problem_of(
        kind,
        obj,
        REASON_TOPOLOGY_MANAGED_REPLICAS,
        f"Cluster {namespace}/{cluster_name} sets {path} to {worker.get('replicas')}: Cluster "
        f"API's topology controller reverts every other replica change, so it is not scaled; "
        f"remove {path} from the Cluster to let karpenter-capi scale this {kind}",
    )
    cluster_meta = _meta(cluster) if cluster is not None else {}
    if not cluster_meta.get("uid"):
        return problem
    involved = {
        "apiVersion": str((cluster or {}).get("apiVersion") or ""),
        "kind": "Cluster",
        "metadata": {
            "name": cluster_name,
            "namespace": namespace,
            "uid": str(cluster_meta["uid"]),
        },
    }
    return dataclasses.replace(problem, also=(involved,))


def leave_out_topology_managed(selection: Selection) -> None:
    """Move the selected resources whose replicas a Cluster topology sets to the problems."""
    kept = []
    for resource, obj in selection.selected:
        problem = topology_replicas_problem(resource.kind, obj, selection.clusters)
        if problem is None:
            kept.append((resource, obj))
        else:
            selection.problems.append(problem)
    selection.selected = kept
