"""Descriptors of the Kubernetes resources the project reads and writes.

A ``Resource`` names a REST resource (group, version, plural) together with the facts a client
needs to build URLs (scope) and objects (kind). Controllers pass these to ``KubeClient`` calls
instead of strings, so a typo is a NameError, not a 404 at run time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Resource:
    """One REST resource of a Kubernetes API: what every ``KubeClient`` call takes to name it."""

    group: str  # "" for the core API group
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """``plural.group`` as kubectl and errors spell it: ``machines.cluster.x-k8s.io``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The REST path, e.g. ``/apis/apps/v1/namespaces/default/deployments/web/scale``."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base

    def with_version(self, version: str) -> Resource:
        return Resource(self.group, version, self.plural, self.kind, self.namespaced)


KARPENTER_GROUP = "karpenter.sh"
CAPI_NODECLASS_GROUP = "karpenter.cluster.x-k8s.io"
CAPI_GROUP = "cluster.x-k8s.io"
CAPI_INFRASTRUCTURE_GROUP = "infrastructure.cluster.x-k8s.io"

# Core and built-in groups.
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
PODS = Resource("", "v1", "pods", "Pod", True)
NODES = Resource("", "v1", "nodes", "Node", False)
EVENTS = Resource("", "v1", "events", "Event", True)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
SECRETS = Resource("", "v1", "secrets", "Secret", True)
SERVICES = Resource("", "v1", "services", "Service", True)
PERSISTENT_VOLUME_CLAIMS = Resource(
    "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True
)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
POD_DISRUPTION_BUDGETS = Resource(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True
)
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet", True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet", True)
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False)
CSI_NODES = Resource("storage.k8s.io", "v1", "csinodes", "CSINode", False)
CUSTOM_RESOURCE_DEFINITIONS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)

# Karpenter's API and the Cluster API node class.
NODEPOOLS = Resource(KARPENTER_GROUP, "v1", "nodepools", "NodePool", False)
NODECLAIMS = Resource(KARPENTER_GROUP, "v1", "nodeclaims", "NodeClaim", False)
CLUSTER_API_NODE_CLASSES = Resource(
    CAPI_NODECLASS_GROUP, "v1alpha1", "clusterapinodeclasses", "ClusterAPINodeClass", False
)

# Cluster API core. The served version is discovered at start-up (v1beta2 preferred, v1beta1
# accepted, see ``core.kube.discovery``); these carry the preferred one.
CLUSTERS = Resource(CAPI_GROUP, "v1beta2", "clusters", "Cluster", True)
MACHINES = Resource(CAPI_GROUP, "v1beta2", "machines", "Machine", True)
MACHINE_SETS = Resource(CAPI_GROUP, "v1beta2", "machinesets", "MachineSet", True)
MACHINE_DEPLOYMENTS = Resource(
    CAPI_GROUP, "v1beta2", "machinedeployments", "MachineDeployment", True
)
MACHINE_POOLS = Resource(CAPI_GROUP, "v1beta2", "machinepools", "MachinePool", True)
