"""Nodes that carry Karpenter's labels but that no NodeClaim holds: said on the Node.

A Node made by hand with ``karpenter.sh/nodepool`` (or ``karpenter.sh/registered``,
``karpenter.sh/initialized``), copied from another cluster, or left behind by a NodeClaim removed
without its finalizer looks like a Karpenter node to a user and to ``kubectl get nodes -L``, yet
nothing acts on it: disruption, expiry, drift, drain and the NodePool's counts all go through a
NodeClaim. Nothing said so. This controller writes one ``NodeNotClaimed`` Warning Event on such a
Node (again only if what it says changes), once the Node has existed longer than a NodeClaim
may take to learn its provider ID, and never touches the Node itself: it may be a user's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.events import WARNING
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES, Resource
from karpenter_capi.core.lifecycle.nodes import nodeclaim_keys_for_node
from karpenter_capi.core.lifecycle.writes import Writes
from karpenter_capi.core.runtime.controller import (
    DONE,
    WORKLOAD,
    ControllerContext,
    Key,
    Result,
    Watch,
)

NAME: Final = "node.unclaimed"
LABELS: Final = (wellknown.LABEL_NODEPOOL, wellknown.LABEL_REGISTERED, wellknown.LABEL_INITIALIZED)
GRACE: Final = 120.0
"""Seconds a labelled Node may go unclaimed before it is said: a Node can join before the
launch has written its provider ID on the NodeClaim."""


def _karpenter_labels(node: Mapping[str, Any]) -> dict[str, str]:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return {key: str(labels[key]) for key in LABELS if key in labels}


def unclaimed_message(node: Mapping[str, Any]) -> str | None:
    """What a Node with Karpenter's labels is told when no NodeClaim holds it; ``None`` for a
    Node without them."""
    labels = _karpenter_labels(node)
    if not labels:
        return None
    provider_id = (node.get("spec") or {}).get("providerID") or "(none)"
    shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return (
        f"Node carries {shown} but no NodeClaim holds it (provider ID {provider_id}): "
        "Karpenter does not launch, count, disrupt or drain it; if it was made by hand, "
        "remove the karpenter.sh/ labels, or delete it if its NodeClaim is gone"
    )


def holds(claim: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether ``claim`` is ``node``'s NodeClaim (provider ID, ``status.nodeName`` or owner)."""
    status = claim.get("status") or {}
    node_meta = node.get("metadata") or {}
    provider_id = (node.get("spec") or {}).get("providerID")
    if provider_id and status.get("providerID") == provider_id:
        return True
    if status.get("nodeName") and status.get("nodeName") == node_meta.get("name"):
        return True
    name = (claim.get("metadata") or {}).get("name")
    return any(
        ref.get("kind") == NODECLAIMS.kind and ref.get("name") == name
        for ref in node_meta.get("ownerReferences") or ()
    )


class UnclaimedNodeController:
    """Warns on Nodes labelled as Karpenter's that no NodeClaim holds."""

    name = NAME
    primary = NODES
    primary_cluster = WORKLOAD

    def __init__(self, ctx: ControllerContext, *, grace: float = GRACE) -> None:
        self._ctx = ctx
        self._writes = Writes(ctx, NAME)
        self._grace = grace
        self._said: dict[str, str] = {}  # Node uid -> the message last written on it

    def watches(self) -> Sequence[Watch]:
        return [Watch(NODECLAIMS, self._node_of)]

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return [(NODES, WORKLOAD), (NODECLAIMS, WORKLOAD)]

    @staticmethod
    def _node_of(claim: JsonObject) -> Iterable[Key]:
        name = (claim.get("status") or {}).get("nodeName")
        return (str(name),) if name else ()

    def reconcile(self, key: Key) -> Result:
        node = self._ctx.caches.store(NODES, WORKLOAD).get(key)
        if node is None:
            return DONE
        meta = node["metadata"]
        uid = str(meta.get("uid") or key)
        message = unclaimed_message(node)
        if message is None or meta.get("deletionTimestamp") or self._claimed(node):
            self._said.pop(uid, None)
            return DONE
        created = meta.get("creationTimestamp")
        if created:
            age = (self._ctx.clock.now() - parse_timestamp(str(created))).total_seconds()
            if age < self._grace:
                return Result(requeue_after=self._grace - age)
        if self._said.get(uid) != message:
            self._said[uid] = message
            self._writes.event(node, WARNING, "NodeNotClaimed", message)
        return DONE

    def _claimed(self, node: JsonObject) -> bool:
        claims = self._ctx.caches.store(NODECLAIMS, WORKLOAD)
        if any(claims.get(k) is not None for k in nodeclaim_keys_for_node(self._ctx.caches, node)):
            return True
        return any(holds(claim, node) for claim in claims.list())
