"""The Cluster topology controller of the emulation: what a ClusterClass-managed Cluster imposes
on the MachineDeployments and MachinePools it owns.

Most new Cluster API clusters are built from a ClusterClass; the topology controller then owns
their workers. Where ``Cluster.spec.topology.workers.machineDeployments[].replicas`` (or
``machinePools[]``) is set, every replica change anyone else writes is reverted at the next
reconcile, which any change of the owned object triggers; where it is unset, the field is left
to whoever scales (upstream's autoscaler case). An autoprovisioner that ignores this fights the
topology forever, and this controller is what makes that fight visible under test.

Upstream (``exp/topology/desiredstate/desired_state.go``: ``computeMachineDeployment``,
``computeMachinePool``) computes each worker's desired object and applies it with server-side
apply: ``spec.replicas`` is the topology's ``replicas`` (absent when unset, so not owned), labels
and annotations are the topology's ``metadata`` merged over the ClusterClass's, plus
``cluster.x-k8s.io/cluster-name``, ``topology.cluster.x-k8s.io/owned`` and
``topology.cluster.x-k8s.io/deployment-name`` (``pool-name``), on the object and on
``spec.template.metadata``. The emulation reproduces that for objects that already carry those
labels: it does not create workers from a ClusterClass (there are no ClusterClass objects here;
a test creates the owned MachineDeployment as the topology controller would have), and a label
the topology stops setting is not removed (that takes managed-fields bookkeeping). Both Cluster
layouts work: v1beta1 (``spec.topology.class``) and v1beta2 (``spec.topology.classRef``) keep
``workers`` in the same place. A paused Cluster is not reconciled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.cache import make_key
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import Conflict, NotFound
from karpenter_capi.core.kube.resources import CLUSTERS
from karpenter_capi.core.runtime.controller import DONE, MANAGEMENT, Caches, Key, Result, Watch
from karpenter_capi.sim.capi.objects import (
    LABEL_CLUSTER_NAME,
    capi_resources,
    in_namespace,
    is_deleting,
    is_paused,
    labels_of,
    merge_diff,
    name_of,
    namespace_of,
    nested,
    resource_at,
)
from karpenter_capi.sim.capi.settings import EmulationSettings

# Upstream names (sigs.k8s.io/cluster-api/api/core/v1beta2, common_types.go).
LABEL_TOPOLOGY_OWNED: Final = "topology.cluster.x-k8s.io/owned"
LABEL_TOPOLOGY_DEPLOYMENT: Final = "topology.cluster.x-k8s.io/deployment-name"
LABEL_TOPOLOGY_POOL: Final = "topology.cluster.x-k8s.io/pool-name"
# Never propagated to the workers (computeMachineDeployment deletes them).
_NOT_PROPAGATED: Final = (
    "topology.cluster.x-k8s.io/hold-upgrade-sequence",
    "topology.cluster.x-k8s.io/defer-upgrade",
)


def topology_workers(cluster: Mapping[str, Any], field: str) -> list[Mapping[str, Any]]:
    """``spec.topology.workers.<field>`` of ``cluster`` (``machineDeployments`` or
    ``machinePools``), in either layout; empty for a Cluster without a topology."""
    workers = nested(cluster, "spec", "topology", "workers", field)
    if not isinstance(workers, list):
        return []
    return [w for w in workers if isinstance(w, Mapping) and w.get("name")]


def desired_worker(
    cluster: Mapping[str, Any], worker: Mapping[str, Any], name_label: str
) -> JsonObject:
    """The fields the topology sets on one worker's MachineDeployment or MachinePool."""
    found = worker.get("metadata")
    meta: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    labels |= {
        LABEL_CLUSTER_NAME: name_of(cluster),
        LABEL_TOPOLOGY_OWNED: "",
        name_label: str(worker["name"]),
    }
    annotations = {
        str(k): str(v)
        for k, v in (meta.get("annotations") or {}).items()
        if k not in _NOT_PROPAGATED
    }
    desired: JsonObject = {
        "metadata": {"labels": labels, "annotations": annotations},
        "spec": {"template": {"metadata": {"labels": labels, "annotations": annotations}}},
    }
    replicas = worker.get("replicas")
    if isinstance(replicas, int) and not isinstance(replicas, bool):
        desired["spec"]["replicas"] = replicas
    return desired


class TopologyController:
    """Applies each topology Cluster's workers to the objects it owns; see the module
    docstring."""

    name = "sim.capi.topology"
    primary_cluster = MANAGEMENT

    def __init__(
        self,
        management: KubeClient,
        caches: Caches,
        clock: Clock,
        settings: EmulationSettings | None = None,
    ) -> None:
        self.client = management
        self.caches = caches
        self.clock = clock
        self.settings = settings or EmulationSettings()
        self.primary = resource_at(CLUSTERS, self.settings.version)
        deployments, _, _, pools = capi_resources(self.settings.version)
        self._workers = (
            (deployments, "machineDeployments", LABEL_TOPOLOGY_DEPLOYMENT),
            (pools, "machinePools", LABEL_TOPOLOGY_POOL),
        )

    def watches(self) -> Sequence[Watch]:
        return [
            Watch(resource, to_keys=self._owned_to_cluster, cluster=MANAGEMENT)
            for resource, _, _ in self._workers
        ]

    def reads(self) -> Sequence[tuple[Any, str]]:
        return []

    def _owned_to_cluster(self, obj: JsonObject) -> Iterable[Key]:
        labels = labels_of(obj)
        cluster = labels.get(LABEL_CLUSTER_NAME)
        if LABEL_TOPOLOGY_OWNED not in labels or not cluster:
            return []
        return [make_key(cluster, namespace_of(obj) or None)]

    def reconcile(self, key: Key) -> Result:
        cluster = self.caches.store(self.primary, MANAGEMENT).get(key)
        if cluster is None or is_deleting(cluster) or is_paused(cluster):
            return DONE
        if nested(cluster, "spec", "paused") is True:
            return DONE
        for resource, field, name_label in self._workers:
            owned = [
                obj
                for obj in in_namespace(
                    self.caches.store(resource, MANAGEMENT), namespace_of(cluster)
                )
                if labels_of(obj).get(LABEL_CLUSTER_NAME) == name_of(cluster)
                and LABEL_TOPOLOGY_OWNED in labels_of(obj)
                and not is_deleting(obj)
            ]
            for worker in topology_workers(cluster, field):
                desired = desired_worker(cluster, worker, name_label)
                for obj in owned:
                    if labels_of(obj).get(name_label) == worker["name"]:
                        self._apply(resource, obj, desired)
        return DONE

    def _apply(self, resource: Any, obj: JsonObject, desired: JsonObject) -> None:
        diff = merge_diff(obj, desired)
        if not diff:
            return
        try:
            self.client.patch(resource, name_of(obj), diff, namespace_of(obj))
        except (Conflict, NotFound):
            # Gone, or changed under us: the change's event brings the next reconcile.
            return
