"""How a NodeClaim finds its Node, and a Node event finds its NodeClaim.

The join key is the provider ID: the provider writes it on the NodeClaim's status at launch
and the kubelet (or cloud controller) writes the same string on the Node's ``spec.providerID``.
Both directions are answered from the informer caches through indexes, which this module adds
to the driver's stores on first use when the driver did not already register them, so a Node
event costs a dictionary lookup, not a scan of every NodeClaim.

Also here: the taints the lifecycle looks for on a Node, matched like ``Taint.MatchTaint``
(key and effect).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.cache import IndexFunc, Store, object_key
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.indexes import BY_PROVIDER_ID, by_provider_id
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES
from karpenter_capi.core.runtime.controller import WORKLOAD, Caches, Key

NODECLAIMS_BY_PROVIDER_ID: Final = BY_PROVIDER_ID
"""Index of the NodeClaim store: ``status.providerID`` -> NodeClaims (the runtime manager
registers it under this name; the Node store's index of ``spec.providerID`` shares it)."""

# Taints the node lifecycle and cloud controllers put on every new Node and take off when it
# is usable; a NodeClaim is not initialized while one remains (upstream KnownEphemeralTaints).
EPHEMERAL_TAINT_KEYS: Final = (
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    wellknown.TAINT_UNREGISTERED_KEY,
)


def nodeclaim_provider_id(obj: Mapping[str, Any]) -> list[str]:
    status = obj.get("status")
    value = status.get("providerID") if isinstance(status, Mapping) else None
    return [value] if isinstance(value, str) and value else []


def _ensure_index(store: Store[JsonObject], name: str, func: IndexFunc[JsonObject]) -> None:
    try:
        store.index_values(name)
    except KeyError:
        # Another worker may add it between the check and here; that is fine.
        with contextlib.suppress(ValueError):
            store.add_indexer(name, func)


def nodes_for_provider_id(caches: Caches, provider_id: str) -> list[JsonObject]:
    """Nodes whose ``spec.providerID`` is ``provider_id`` (normally zero or one)."""
    store = caches.store(NODES, WORKLOAD)
    _ensure_index(store, BY_PROVIDER_ID, by_provider_id)
    return store.by_index(BY_PROVIDER_ID, provider_id)


def nodeclaims_for_provider_id(caches: Caches, provider_id: str) -> list[JsonObject]:
    store = caches.store(NODECLAIMS, WORKLOAD)
    _ensure_index(store, NODECLAIMS_BY_PROVIDER_ID, nodeclaim_provider_id)
    return store.by_index(NODECLAIMS_BY_PROVIDER_ID, provider_id)


def nodeclaim_keys_for_node(caches: Caches, node: Mapping[str, Any]) -> list[Key]:
    """The NodeClaims a Node event concerns: by provider ID, and by the owner reference that
    registration puts on the Node (which still names the NodeClaim if the ID ever differs)."""
    keys: list[Key] = []
    provider_id = (node.get("spec") or {}).get("providerID")
    if isinstance(provider_id, str) and provider_id:
        keys.extend(object_key(claim) for claim in nodeclaims_for_provider_id(caches, provider_id))
    for ref in (node.get("metadata") or {}).get("ownerReferences") or ():
        if (
            isinstance(ref, Mapping)
            and ref.get("kind") == NODECLAIMS.kind
            and str(ref.get("apiVersion", "")).startswith(f"{NODECLAIMS.group}/")
            and ref.get("name")
        ):
            keys.append(str(ref["name"]))
    return list(dict.fromkeys(keys))


# --- taints ------------------------------------------------------------------------------------


def taint_matches(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.get("key") == b.get("key") and a.get("effect") == b.get("effect")


def format_taint(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    key, effect = taint.get("key", ""), taint.get("effect", "")
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def merge_taints(
    existing: Sequence[Mapping[str, Any]], extra: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``existing`` plus each of ``extra`` not already there (by key and effect)."""
    merged = [dict(t) for t in existing]
    for taint in extra:
        if not any(taint_matches(taint, have) for have in merged):
            merged.append({k: v for k, v in taint.items() if v not in (None, "")})
    return merged


UNREGISTERED_TAINT: Final = {
    "key": wellknown.TAINT_UNREGISTERED_KEY,
    "effect": wellknown.TAINT_UNREGISTERED_EFFECT,
}


def node_taints(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(t) for t in (node.get("spec") or {}).get("taints") or () if isinstance(t, Mapping)]


def node_is_ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False
