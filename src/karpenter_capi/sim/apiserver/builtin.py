"""The built-in Kubernetes resources the in-memory API server serves from the start.

Names, short names, categories, subresources and field labels match what a real kube-apiserver
advertises (``kubectl api-resources``), so kubectl pointed at the HTTP front resolves ``po``,
``deploy`` or ``pdb`` and ``kubectl get all`` picks the same kinds.
"""

from __future__ import annotations

from karpenter_capi.sim.apiserver.definitions import ResourceDefinition

_POD_FIELDS = frozenset(
    {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    }
)
_EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)


def _core(
    plural: str,
    kind: str,
    *,
    namespaced: bool = True,
    short: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    subresources: frozenset[str] = frozenset(),
    fields: frozenset[str] = frozenset(),
    group: str = "",
    version: str = "v1",
    singular: str | None = None,
    scale_selector_path: str | None = ".status.selector",
) -> ResourceDefinition:
    return ResourceDefinition(
        group=group,
        versions=(version,),
        plural=plural,
        singular=singular or kind.lower(),
        kind=kind,
        namespaced=namespaced,
        short_names=short,
        categories=categories,
        subresources=subresources,
        scale_selector_path=scale_selector_path,
        field_labels=fields,
    )


_STATUS = frozenset({"status"})
_STATUS_SCALE = frozenset({"status", "scale"})

BUILTIN_DEFINITIONS: tuple[ResourceDefinition, ...] = (
    _core(
        "namespaces",
        "Namespace",
        namespaced=False,
        short=("ns",),
        subresources=_STATUS,
        fields=frozenset({"status.phase"}),
    ),
    _core(
        "pods",
        "Pod",
        short=("po",),
        categories=("all",),
        subresources=frozenset({"status", "eviction", "binding"}),
        fields=_POD_FIELDS,
    ),
    _core(
        "nodes",
        "Node",
        namespaced=False,
        short=("no",),
        subresources=_STATUS,
        fields=frozenset({"spec.unschedulable"}),
    ),
    _core("events", "Event", short=("ev",), fields=_EVENT_FIELDS),
    _core("configmaps", "ConfigMap", short=("cm",)),
    _core("secrets", "Secret", fields=frozenset({"type"})),
    _core("services", "Service", short=("svc",), categories=("all",), subresources=_STATUS),
    _core("serviceaccounts", "ServiceAccount", short=("sa",)),
    _core("persistentvolumeclaims", "PersistentVolumeClaim", short=("pvc",), subresources=_STATUS),
    _core(
        "persistentvolumes",
        "PersistentVolume",
        namespaced=False,
        short=("pv",),
        subresources=_STATUS,
    ),
    _core("leases", "Lease", group="coordination.k8s.io"),
    _core(
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        group="policy",
        short=("pdb",),
        subresources=_STATUS,
    ),
    _core(
        "daemonsets",
        "DaemonSet",
        group="apps",
        short=("ds",),
        categories=("all",),
        subresources=_STATUS,
    ),
    _core(
        "deployments",
        "Deployment",
        group="apps",
        short=("deploy",),
        categories=("all",),
        subresources=_STATUS_SCALE,
        scale_selector_path=".spec.selector",
    ),
    _core(
        "replicasets",
        "ReplicaSet",
        group="apps",
        short=("rs",),
        categories=("all",),
        subresources=_STATUS_SCALE,
        fields=frozenset({"status.replicas"}),
        scale_selector_path=".spec.selector",
    ),
    _core(
        "statefulsets",
        "StatefulSet",
        group="apps",
        short=("sts",),
        categories=("all",),
        subresources=_STATUS_SCALE,
        scale_selector_path=".spec.selector",
    ),
    _core(
        "storageclasses", "StorageClass", group="storage.k8s.io", namespaced=False, short=("sc",)
    ),
    _core("csinodes", "CSINode", group="storage.k8s.io", namespaced=False),
    _core(
        "priorityclasses",
        "PriorityClass",
        group="scheduling.k8s.io",
        namespaced=False,
        short=("pc",),
    ),
    # RBAC objects are stored, never enforced: a chart or Kustomize output applies as it would.
    _core("roles", "Role", group="rbac.authorization.k8s.io"),
    _core("rolebindings", "RoleBinding", group="rbac.authorization.k8s.io"),
    _core("clusterroles", "ClusterRole", group="rbac.authorization.k8s.io", namespaced=False),
    _core(
        "clusterrolebindings",
        "ClusterRoleBinding",
        group="rbac.authorization.k8s.io",
        namespaced=False,
    ),
    _core(
        "customresourcedefinitions",
        "CustomResourceDefinition",
        group="apiextensions.k8s.io",
        namespaced=False,
        short=("crd", "crds"),
        categories=("api-extensions",),
        subresources=_STATUS,
    ),
)

# Namespaces every cluster starts with.
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
