"""Small readers and builders over raw Cluster API objects, shared by the emulated controllers.

The emulation works on the JSON dicts the informer caches hold (as every controller here does),
and the same few questions come up in each controller: whose controller reference does this
object carry, which objects does an owner control, when was it created, what do its labels say.
Answering them in one place keeps the controllers about Cluster API semantics, not dict access.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.kube.cache import Store, make_key
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.indexes import BY_OWNER_UID, by_owner_uid
from karpenter_capi.core.kube.resources import (
    CAPI_GROUP,
    MACHINE_DEPLOYMENTS,
    MACHINE_POOLS,
    MACHINE_SETS,
    MACHINES,
    Resource,
)

# Upstream names (sigs.k8s.io/cluster-api/api/core/v1beta2).
MACHINE_FINALIZER: Final = "machine.cluster.x-k8s.io"
MACHINE_POOL_FINALIZER: Final = "machinepool.cluster.x-k8s.io"
LABEL_CLUSTER_NAME: Final = "cluster.x-k8s.io/cluster-name"
LABEL_DEPLOYMENT_NAME: Final = "cluster.x-k8s.io/deployment-name"
LABEL_SET_NAME: Final = "cluster.x-k8s.io/set-name"
LABEL_POOL_NAME: Final = "cluster.x-k8s.io/pool-name"
LABEL_TEMPLATE_HASH: Final = "machine-template-hash"
ANNOTATION_REVISION: Final = "machinedeployment.clusters.x-k8s.io/revision"
ANNOTATION_DESIRED_REPLICAS: Final = "machinedeployment.clusters.x-k8s.io/desired-replicas"
ANNOTATION_MAX_REPLICAS: Final = "machinedeployment.clusters.x-k8s.io/max-replicas"
ANNOTATION_DISABLE_MACHINE_CREATE: Final = (
    "machinedeployment.clusters.x-k8s.io/disable-machine-create"
)
ANNOTATION_PAUSED: Final = "cluster.x-k8s.io/paused"

# kube's generated-name alphabet (no vowels, no look-alikes), as CAPI's ``.random``.
_NAME_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_MAX_NAME: Final = 63


def metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    # ``type is dict`` first: objects are plain dicts, and an ABC check costs several times more.
    return meta if type(meta) is dict or isinstance(meta, Mapping) else {}


def name_of(obj: Mapping[str, Any]) -> str:
    return str(metadata(obj).get("name") or "")


def namespace_of(obj: Mapping[str, Any]) -> str:
    return str(metadata(obj).get("namespace") or "")


def uid_of(obj: Mapping[str, Any]) -> str:
    return str(metadata(obj).get("uid") or "")


def key_of(obj: Mapping[str, Any]) -> str:
    return make_key(name_of(obj), namespace_of(obj) or None)


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = metadata(obj).get("labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    annotations = metadata(obj).get("annotations")
    if not isinstance(annotations, Mapping):
        return {}
    return {str(k): str(v) for k, v in annotations.items()}


def finalizers_of(obj: Mapping[str, Any]) -> list[str]:
    finalizers = metadata(obj).get("finalizers")
    return [str(f) for f in finalizers] if isinstance(finalizers, list) else []


def release_finalizer(
    client: KubeClient, resource: Resource, obj: Mapping[str, Any], finalizer: str
) -> None:
    """Remove ``finalizer`` from ``obj`` (at its resourceVersion); gone already is fine."""
    remaining = [f for f in finalizers_of(obj) if f != finalizer]
    patch = {
        "metadata": {
            "finalizers": remaining or None,
            "resourceVersion": metadata(obj).get("resourceVersion"),
        }
    }
    with contextlib.suppress(NotFound):
        client.patch(resource, name_of(obj), patch, namespace_of(obj))


def is_deleting(obj: Mapping[str, Any]) -> bool:
    return bool(metadata(obj).get("deletionTimestamp"))


def is_paused(obj: Mapping[str, Any]) -> bool:
    """``cluster.x-k8s.io/paused`` on the object: every CAPI controller leaves it alone."""
    return ANNOTATION_PAUSED in annotations_of(obj)


def nested(obj: Any, *path: str) -> Any:
    """``obj[path[0]][path[1]]...``, or ``None`` as soon as a step is missing or not a dict."""
    current = obj
    for part in path:
        if type(current) is not dict and not isinstance(current, Mapping):
            return None
        current = current.get(part)
    return current


def as_int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    return default


def desired_replicas(obj: Mapping[str, Any]) -> int:
    """``spec.replicas``; CAPI's webhooks default an unset count to 1."""
    replicas = nested(obj, "spec", "replicas")
    return max(0, as_int(replicas, 1)) if replicas is not None else 1


def created_at(obj: Mapping[str, Any]) -> datetime | None:
    return _timestamp(metadata(obj).get("creationTimestamp"))


def deleted_at(obj: Mapping[str, Any]) -> datetime | None:
    return _timestamp(metadata(obj).get("deletionTimestamp"))


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_timestamp(value)
    except ValueError:
        return None


# --- ownership ----------------------------------------------------------------------------------


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference with ``controller: true``, if any."""
    refs = metadata(obj).get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if (type(ref) is dict or isinstance(ref, Mapping)) and ref.get("controller") is True:
            return ref
    return None


def controller_key(obj: Mapping[str, Any], kind: str) -> str | None:
    """``namespace/name`` of the object's controller when it is a ``kind`` of Cluster API."""
    ref = controller_ref(obj)
    if ref is None or ref.get("kind") != kind:
        return None
    group = str(ref.get("apiVersion") or "").partition("/")[0]
    if group != CAPI_GROUP:
        return None
    return make_key(str(ref.get("name") or ""), namespace_of(obj) or None)


def is_controlled_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    ref = controller_ref(obj)
    return ref is not None and ref.get("uid") == uid_of(owner)


def new_controller_ref(owner: Mapping[str, Any], kind: str, version: str) -> JsonObject:
    """The reference CAPI puts on what it creates: controller, blocking foreground deletion."""
    return {
        "apiVersion": f"{CAPI_GROUP}/{version}",
        "kind": kind,
        "name": name_of(owner),
        "uid": uid_of(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controlled_by(store: Store[JsonObject], owner: Mapping[str, Any]) -> list[JsonObject]:
    """Objects of ``store`` whose controller is ``owner``, through the owner-uid index when the
    cache has one (``add_capi_emulation`` registers it), else by scanning."""
    uid = uid_of(owner)
    try:
        candidates = store.by_index(BY_OWNER_UID, uid)
    except KeyError:
        candidates = [obj for obj in store.list() if uid in by_owner_uid(obj)]
    # ``is_controlled_by`` with the owner's uid read once, not once per candidate.
    return [obj for obj in candidates if _controller_uid(obj) == uid]


def _controller_uid(obj: Mapping[str, Any]) -> Any:
    ref = controller_ref(obj)
    return None if ref is None else ref.get("uid")


def in_namespace(store: Store[JsonObject], namespace: str) -> list[JsonObject]:
    return [obj for obj in store.list() if namespace_of(obj) == namespace]


# --- names and labels ---------------------------------------------------------------------------


def random_suffix(rand: random.Random, length: int = 5) -> str:
    return "".join(rand.choice(_NAME_ALPHABET) for _ in range(length))


def generated_name(prefix: str, rand: random.Random) -> str:
    """``<prefix>-<random>`` trimmed as CAPI trims Machine names: past 63 characters the prefix
    is cut to 58 so the random part survives."""
    base = f"{prefix}-"
    if len(base) + 5 > _MAX_NAME:
        base = base[: _MAX_NAME - 5]
    return base + random_suffix(rand)


def label_value(text: str) -> str:
    """A label value for a name (CAPI ``format.MustFormatValue``): names longer than a label
    value may be are replaced by a hash."""
    if len(text) <= _MAX_NAME:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:40]
    return f"hash_{digest}_z"


def encode_hash(data: bytes, length: int = 10) -> str:
    """``length`` characters of the generated-name alphabet from a digest of ``data``, as kube's
    ``rand.SafeEncodeString`` of a template hash."""
    number = int.from_bytes(hashlib.sha256(data).digest()[:8], "big")
    chars = []
    for _ in range(length):
        number, digit = divmod(number, len(_NAME_ALPHABET))
        chars.append(_NAME_ALPHABET[digit])
    return "".join(chars)


# --- references in either shape -----------------------------------------------------------------


def ref_group(ref: Mapping[str, Any]) -> str:
    """The API group of a v1beta1 (``apiVersion``) or v1beta2 (``apiGroup``) reference."""
    group = ref.get("apiGroup")
    if isinstance(group, str) and group:
        return group
    api_version = str(ref.get("apiVersion") or "")
    group, slash, _ = api_version.rpartition("/")
    return group if slash else ""


def resource_at(resource: Resource, version: str) -> Resource:
    return resource if resource.version == version else resource.with_version(version)


def capi_resources(version: str) -> tuple[Resource, Resource, Resource, Resource]:
    """MachineDeployments, MachineSets, Machines, MachinePools at ``version``."""
    return (
        resource_at(MACHINE_DEPLOYMENTS, version),
        resource_at(MACHINE_SETS, version),
        resource_at(MACHINES, version),
        resource_at(MACHINE_POOLS, version),
    )


def merge_diff(current: Any, desired: Mapping[str, Any]) -> JsonObject:
    """The JSON merge patch that turns ``current`` into ``current`` updated with ``desired``
    (``None`` values delete); empty when nothing would change, so callers skip the write."""
    base = current if isinstance(current, Mapping) else {}
    diff: JsonObject = {}
    for key, value in desired.items():
        old = base.get(key)
        if value is None:
            if key in base:
                diff[key] = None
        elif isinstance(value, Mapping) and isinstance(old, Mapping):
            sub = merge_diff(old, value)
            if sub:
                diff[key] = sub
        elif old != value:
            diff[key] = value
    return diff
