"""Finding a Node's NodeClaim, a NodeClaim's Nodes and a Node's pods in the informer caches.

Both termination controllers need the other half of the Node/NodeClaim pair, and both must agree
on what "the other half" is, or one would wait forever for an object the other never touches.
The join is upstream Karpenter's: ``Node.spec.providerID`` equals
``NodeClaim.status.providerID``; before the provider ID is known, ``NodeClaim.status.nodeName``
names the Node. Lookups use the caches' indexes when the driver registered them and fall back to
a scan otherwise, so the controllers work under any driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.duration import DurationError, parse_duration
from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.kube.cache import Store
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.indexes import BY_NODE_NAME, BY_PROVIDER_ID, pods_by_node_name


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    current: Any = obj
    for part in path:
        if not isinstance(current, Mapping):
            return None
        current = current.get(part)
    return current


def name_of(obj: Mapping[str, Any]) -> str:
    return str(_get(obj, "metadata", "name") or "")


def provider_id_of_node(node: Mapping[str, Any]) -> str:
    return str(_get(node, "spec", "providerID") or "")


def provider_id_of_nodeclaim(nodeclaim: Mapping[str, Any]) -> str:
    return str(_get(nodeclaim, "status", "providerID") or "")


def node_name_of_nodeclaim(nodeclaim: Mapping[str, Any]) -> str:
    return str(_get(nodeclaim, "status", "nodeName") or "")


def finalizers_of(obj: Mapping[str, Any]) -> list[str]:
    found = _get(obj, "metadata", "finalizers")
    return [f for f in found if isinstance(f, str)] if isinstance(found, list) else []


def has_termination_finalizer(obj: Mapping[str, Any]) -> bool:
    return wellknown.FINALIZER_TERMINATION in finalizers_of(obj)


def deletion_time(obj: Mapping[str, Any]) -> datetime | None:
    stamp = _get(obj, "metadata", "deletionTimestamp")
    return parse_timestamp(stamp) if isinstance(stamp, str) and stamp else None


def creation_time(obj: Mapping[str, Any]) -> datetime | None:
    stamp = _get(obj, "metadata", "creationTimestamp")
    return parse_timestamp(stamp) if isinstance(stamp, str) and stamp else None


def is_deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_get(obj, "metadata", "deletionTimestamp"))


def label_of(obj: Mapping[str, Any], key: str) -> str:
    labels = _get(obj, "metadata", "labels")
    value = labels.get(key) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) else ""


def nodeclaims_for_node(node: Mapping[str, Any], nodeclaims: Store[JsonObject]) -> list[JsonObject]:
    """The NodeClaims that stand for ``node`` (normally one)."""
    provider_id = provider_id_of_node(node)
    name = name_of(node)
    if provider_id:
        try:
            matched = nodeclaims.by_index(BY_PROVIDER_ID, provider_id)
        except KeyError:  # the driver indexes NodeClaims by status.providerID; not every one
            matched = [c for c in nodeclaims.list() if provider_id_of_nodeclaim(c) == provider_id]
        if matched:
            return sorted(matched, key=name_of)
    # By name only where one side has no provider ID yet: otherwise they are different machines.
    return sorted(
        (
            c
            for c in nodeclaims.list()
            if node_name_of_nodeclaim(c) == name
            and not (provider_id and provider_id_of_nodeclaim(c))
        ),
        key=name_of,
    )


def nodes_for_nodeclaim(nodeclaim: Mapping[str, Any], nodes: Store[JsonObject]) -> list[JsonObject]:
    """The Nodes that joined for ``nodeclaim`` (normally at most one)."""
    found: dict[str, JsonObject] = {}
    provider_id = provider_id_of_nodeclaim(nodeclaim)
    if provider_id:
        try:
            candidates = nodes.by_index(BY_PROVIDER_ID, provider_id)
        except KeyError:
            candidates = [n for n in nodes.list() if provider_id_of_node(n) == provider_id]
        found.update((name_of(n), n) for n in candidates)
    node_name = node_name_of_nodeclaim(nodeclaim)
    if node_name:
        node = nodes.get(node_name)
        # A Node with another provider ID is a different machine that reused the name.
        if node is not None and not (provider_id and provider_id_of_node(node)):
            found[node_name] = node
    return [found[name] for name in sorted(found)]


def pods_on_node(node_name: str, pods: Store[JsonObject]) -> list[JsonObject]:
    try:
        return pods.by_index(BY_NODE_NAME, node_name)
    except KeyError:
        return [p for p in pods.list() if pods_by_node_name(p) == [node_name]]


def termination_deadline(nodeclaim: Mapping[str, Any]) -> tuple[datetime | None, str | None]:
    """When every pod must be off the node: ``(deadline or None, problem or None)``.

    The ``karpenter.sh/nodeclaim-termination-timestamp`` annotation wins (upstream records the
    deadline there once, so it survives restarts); until it is written the deadline is computed
    the same way, from the NodeClaim's deletionTimestamp plus ``spec.terminationGracePeriod``.
    A NodeClaim without a terminationGracePeriod has no deadline: its drain may take forever.
    """
    problem = None
    annotations = _get(nodeclaim, "metadata", "annotations")
    stamp = (
        annotations.get(wellknown.ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP)
        if isinstance(annotations, Mapping)
        else None
    )
    if isinstance(stamp, str) and stamp:
        try:
            return parse_timestamp(stamp), None
        except ValueError:
            problem = (
                f"ignoring malformed {wellknown.ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP} "
                f"annotation {stamp!r}"
            )
    grace = _get(nodeclaim, "spec", "terminationGracePeriod")
    deleted = deletion_time(nodeclaim)
    if not isinstance(grace, str) or not grace or deleted is None:
        return None, problem
    try:
        return deleted + parse_duration(grace), problem
    except DurationError as error:
        return None, f"ignoring spec.terminationGracePeriod: {error}"
