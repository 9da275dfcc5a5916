"""Ready-made index functions for the lookups the autoprovisioner does on every reconcile.

Each works on raw JSON objects as the API sends them (and tolerates missing or mistyped
fields by indexing nothing). For informers that transform objects into models, ``index_by``
turns a small getter into an index function, e.g.
``index_by(lambda pod: pod.spec.node_name)``.

Namespaced relations are indexed under ``namespace/name`` values (a MachineDeployment named
``workers`` in two namespaces is two different owners); use ``make_key`` to build the lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeGuard, TypeVar

from karpenter_capi.core.kube.cache import IndexFunc, make_key

T = TypeVar("T")

# Index names, shared so that the code that registers an index and the code that reads it agree.
BY_NODE_NAME = "nodeName"
BY_PROVIDER_ID = "providerID"
BY_PROVIDER_ID_LIST = "providerIDList"
BY_OWNER_UID = "ownerUID"
BY_MACHINE_DEPLOYMENT = "machineDeployment"
BY_MACHINE_SET = "machineSet"
BY_MACHINE_POOL = "machinePool"

DEPLOYMENT_NAME_LABEL = "cluster.x-k8s.io/deployment-name"
SET_NAME_LABEL = "cluster.x-k8s.io/set-name"
POOL_NAME_LABEL = "cluster.x-k8s.io/pool-name"


# These run for every object of every watch event (the pods informer's two, a Machine's five),
# so they are written for the JSON objects the API sends: ``type(x) is dict`` is checked first,
# and ``isinstance(x, Mapping)`` (an ABC check, several times slower) only for anything else.


def _is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    return type(value) is dict or isinstance(value, Mapping)


def _field_str(obj: Mapping[str, Any], section: str, field: str) -> str | None:
    """``obj[section][field]`` when it is a non-empty string (``None`` otherwise)."""
    inner = obj.get(section)
    if type(inner) is not dict and not isinstance(inner, Mapping):
        return None
    value = inner.get(field)
    return value if isinstance(value, str) and value else None


def _nested_str(obj: Mapping[str, Any], *path: str) -> str | None:
    current: Any = obj
    for part in path:
        if not _is_mapping(current):
            return None
        current = current.get(part)
    return current if isinstance(current, str) and current else None


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if _is_mapping(metadata) else {}


def index_by(getter: Callable[[T], str | Iterable[str] | None]) -> IndexFunc[T]:
    """An index function from a getter returning one value, several values, or ``None``."""

    def index(obj: T) -> list[str]:
        value = getter(obj)
        if value is None:
            return []
        if isinstance(value, str):
            return [value] if value else []
        return [item for item in value if item]

    return index


def pods_by_node_name(pod: Mapping[str, Any]) -> list[str]:
    """A pod under the node it is bound to (unbound pods are not indexed)."""
    node_name = _field_str(pod, "spec", "nodeName")
    return [node_name] if node_name else []


def by_provider_id(obj: Mapping[str, Any]) -> list[str]:
    """Nodes and Machines under ``spec.providerID`` (the join key between the two)."""
    provider_id = _field_str(obj, "spec", "providerID")
    return [provider_id] if provider_id else []


nodes_by_provider_id = by_provider_id
machines_by_provider_id = by_provider_id


def nodeclaims_by_provider_id(claim: Mapping[str, Any]) -> list[str]:
    """A NodeClaim under ``status.providerID`` (unlike Nodes and Machines, it is in the status)."""
    provider_id = _field_str(claim, "status", "providerID")
    return [provider_id] if provider_id else []


def machine_pools_by_provider_id(pool: Mapping[str, Any]) -> list[str]:
    """A MachinePool under each providerID in ``spec.providerIDList``."""
    spec = pool.get("spec")
    ids = spec.get("providerIDList") if _is_mapping(spec) else None
    if not isinstance(ids, list):
        return []
    return [value for value in ids if isinstance(value, str) and value]


def by_owner_uid(obj: Mapping[str, Any]) -> list[str]:
    """An object under the uid of each of its ownerReferences (MachineSet, MachinePool, ...)."""
    metadata = obj.get("metadata")
    if not _is_mapping(metadata):
        return []
    refs = metadata.get("ownerReferences")
    if not isinstance(refs, list):
        return []
    uids = []
    for ref in refs:
        if type(ref) is dict or isinstance(ref, Mapping):
            uid = ref.get("uid")
            if isinstance(uid, str) and uid:
                uids.append(uid)
    return uids


machines_by_owner_uid = by_owner_uid


def _by_label(label: str) -> IndexFunc[Mapping[str, Any]]:
    def index(obj: Mapping[str, Any]) -> list[str]:
        metadata = _metadata(obj)
        labels = metadata.get("labels")
        value = labels.get(label) if _is_mapping(labels) else None
        if not isinstance(value, str) or not value:
            return []
        namespace = metadata.get("namespace")
        return [make_key(value, namespace if isinstance(namespace, str) else None)]

    index.__name__ = f"by_label_{label}"
    return index


machines_by_deployment = _by_label(DEPLOYMENT_NAME_LABEL)
"""A Machine under ``namespace/<MachineDeployment name>`` from its deployment-name label."""

machines_by_machine_set = _by_label(SET_NAME_LABEL)
"""A Machine under ``namespace/<MachineSet name>`` from its set-name label."""

machines_by_machine_pool = _by_label(POOL_NAME_LABEL)
"""A Machine under ``namespace/<MachinePool name>`` from its pool-name label."""


# The usual index sets for raw-dict informers of each kind.
POD_INDEXERS: dict[str, IndexFunc[Mapping[str, Any]]] = {BY_NODE_NAME: pods_by_node_name}
NODE_INDEXERS: dict[str, IndexFunc[Mapping[str, Any]]] = {BY_PROVIDER_ID: nodes_by_provider_id}
MACHINE_INDEXERS: dict[str, IndexFunc[Mapping[str, Any]]] = {
    BY_PROVIDER_ID: machines_by_provider_id,
    BY_OWNER_UID: machines_by_owner_uid,
    BY_MACHINE_DEPLOYMENT: machines_by_deployment,
    BY_MACHINE_SET: machines_by_machine_set,
    BY_MACHINE_POOL: machines_by_machine_pool,
}
NODECLAIM_INDEXERS: dict[str, IndexFunc[Mapping[str, Any]]] = {
    BY_PROVIDER_ID: nodeclaims_by_provider_id,
}
MACHINE_POOL_INDEXERS: dict[str, IndexFunc[Mapping[str, Any]]] = {
    BY_PROVIDER_ID_LIST: machine_pools_by_provider_id,
}
