"""Registration: adopt the Node that joined for a launched NodeClaim.

Once the instance's kubelet has created its Node (found by provider ID), the Node is made a
proper Karpenter node in one optimistic write (resourceVersion precondition, because merge
patches replace the taint, finalizer and ownerReference lists whole):

* the NodeClaim's labels and annotations (which carry the NodePool template's) are copied on;
* its taints and startup taints are merged in, unless the Node is labelled (upstream) or the
  Node or NodeClaim annotated ``karpenter.sh/do-not-sync-taints: "true"``, which says the
  provider's bootstrap owns the taints;
* the ``karpenter.sh/termination`` finalizer and an ownerReference to the NodeClaim are added,
  so the Node cannot vanish without the termination flow and is collected with its NodeClaim;
* the ``karpenter.sh/unregistered:NoExecute`` taint comes off and ``karpenter.sh/registered``
  goes on.

The unregistered taint exists to keep pods off a Node until its labels and taints are synced.
A Node without it (a CAPI bootstrap template that does not set it) is still registered, as
upstream does today, with a Warning Event, because refusing would leave a working node
unmanaged and then delete it at the registration timeout.

Startup taints are only merged before the first successful sync (``karpenter.sh/registered``
absent): after that a daemon may already have removed them, and putting them back would block
the node forever.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.kube.events import WARNING
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES
from karpenter_capi.core.lifecycle.health import RegistrationHealth, set_registration_health
from karpenter_capi.core.lifecycle.launch import LAUNCHED
from karpenter_capi.core.lifecycle.metrics import LifecycleReporter
from karpenter_capi.core.lifecycle.nodes import (
    UNREGISTERED_TAINT,
    merge_taints,
    node_taints,
    nodes_for_provider_id,
    taint_matches,
)
from karpenter_capi.core.lifecycle.said import SaidOnce
from karpenter_capi.core.lifecycle.work import NodeClaimWork, json_copy
from karpenter_capi.core.lifecycle.writes import Writes
from karpenter_capi.core.observability.logs import ref
from karpenter_capi.core.runtime.controller import DONE, ControllerContext, Result

REGISTERED: Final = str(NodeClaimConditionType.REGISTERED)
ZONE: Final = wellknown.LABEL_TOPOLOGY_ZONE


def _do_not_sync_taints(work: NodeClaimWork, node: dict[str, Any]) -> bool:
    meta = node.get("metadata") or {}
    key = wellknown.ANNOTATION_DO_NOT_SYNC_TAINTS
    return "true" in (
        (meta.get("labels") or {}).get(key),
        (meta.get("annotations") or {}).get(key),
        work.annotations.get(key),
    )


def synced_node(work: NodeClaimWork, node: dict[str, Any]) -> dict[str, Any]:
    """``node`` as registration leaves it (a new dict; ``node`` is not modified)."""
    synced: dict[str, Any] = json_copy(node)
    meta = synced.setdefault("metadata", {})
    spec = synced.setdefault("spec", {})
    first_sync = wellknown.LABEL_REGISTERED not in (meta.get("labels") or {})
    finalizers = list(meta.get("finalizers") or [])
    if wellknown.FINALIZER_TERMINATION not in finalizers:
        finalizers.append(wellknown.FINALIZER_TERMINATION)
    meta["finalizers"] = finalizers
    owners = [
        ref
        for ref in meta.get("ownerReferences") or []
        if not (ref.get("kind") == NODECLAIMS.kind and ref.get("name") == work.name)
    ]
    owners.append(
        {
            "apiVersion": NODECLAIMS.api_version,
            "kind": NODECLAIMS.kind,
            "name": work.name,
            "uid": work.uid,
            "blockOwnerDeletion": True,
        }
    )
    meta["ownerReferences"] = owners
    taints = node_taints(synced)
    if not _do_not_sync_taints(work, synced):
        spec_taints = (work.raw.get("spec") or {}).get("taints") or []
        taints = merge_taints(taints, spec_taints)
        if first_sync:
            taints = merge_taints(taints, (work.raw.get("spec") or {}).get("startupTaints") or [])
    taints = [t for t in taints if not taint_matches(t, UNREGISTERED_TAINT)]
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)
    # Which pods the claim was launched for, and the plan it was part of, are the provisioner's
    # notes to itself, not the Node's.
    copied = {k: v for k, v in work.annotations.items() if k not in wellknown.PROVISIONER_NOTES}
    meta["annotations"] = {**(meta.get("annotations") or {}), **copied}
    meta["labels"] = {
        **(meta.get("labels") or {}),
        **work.labels,
        wellknown.LABEL_REGISTERED: "true",
    }
    return synced


def node_patch(stored: dict[str, Any], synced: dict[str, Any]) -> dict[str, Any]:
    """The merge patch from ``stored`` to ``synced``, with ``stored``'s resourceVersion."""
    patch: dict[str, Any] = {}
    for section, fields in (
        ("metadata", ("labels", "annotations", "finalizers", "ownerReferences")),
        ("spec", ("taints",)),
    ):
        before = stored.get(section) or {}
        after = synced.get(section) or {}
        for name in fields:
            if before.get(name) != after.get(name):
                # Lists go whole; maps go whole too, which is safe under the precondition.
                patch.setdefault(section, {})[name] = after.get(name)
    if patch:
        patch.setdefault("metadata", {})["resourceVersion"] = (stored.get("metadata") or {}).get(
            "resourceVersion"
        )
    return patch


class Registration:
    """The registration step of the NodeClaim lifecycle controller."""

    def __init__(
        self,
        ctx: ControllerContext,
        writes: Writes,
        metrics: LifecycleReporter,
        said: SaidOnce | None = None,
    ) -> None:
        self._ctx = ctx
        self._writes = writes
        self._metrics = metrics
        self._said = said or SaidOnce()
        self._health = RegistrationHealth()

    def reconcile(self, work: NodeClaimWork) -> Result:
        if work.conditions.is_true(REGISTERED) or not work.conditions.is_true(LAUNCHED):
            return DONE
        if not work.provider_id:
            return DONE
        nodes = [
            n
            for n in nodes_for_provider_id(self._ctx.caches, work.provider_id)
            if not (n.get("metadata") or {}).get("deletionTimestamp")
        ]
        if not nodes:
            work.conditions.set_unknown(
                REGISTERED, "NodeNotFound", "Node not registered with cluster"
            )
            return DONE
        if len(nodes) > 1:
            work.conditions.set_false(
                REGISTERED,
                "MultipleNodesFound",
                "Invariant violated, matched multiple nodes: "
                + ", ".join(sorted(str(n["metadata"]["name"]) for n in nodes)),
            )
            return DONE
        node = nodes[0]
        node_name = str(node["metadata"]["name"])
        labels = (node.get("metadata") or {}).get("labels") or {}
        has_taint = any(taint_matches(t, UNREGISTERED_TAINT) for t in node_taints(node))
        if wellknown.LABEL_REGISTERED not in labels and not has_taint:
            message = (
                f"Node {node_name} registered without the {wellknown.TAINT_UNREGISTERED_KEY}:"
                f"{wellknown.TAINT_UNREGISTERED_EFFECT} taint; pods may have been scheduled "
                "before its labels and taints were synced"
            )
            self._ctx.log.warning("nodeclaim %s: %s", work.name, message)
            self._writes.event(work.raw, WARNING, "UnregisteredTaintMissing", message)
        patch = node_patch(node, synced_node(work, node))
        work.node = self._writes.patch(NODES, node, patch) if patch else node
        work.status["nodeName"] = node_name
        work.conditions.set_true(REGISTERED)
        # A retry after the NodeClaim's status write lost a conflict, or over caches that lag
        # our writes, says so only at DEBUG.
        first = self._said.first(work.name, work.uid, "registered")
        self._ctx.log.log(
            logging.INFO if first else logging.DEBUG,
            "registered nodeclaim",
            extra={
                "NodeClaim": ref(work.name),
                "provider-id": work.provider_id,
                "Node": ref(node_name),
            },
        )
        self._metrics.registered(work.nodepool, labels.get(ZONE) or work.labels.get(ZONE, ""))
        set_registration_health(self._ctx, self._writes, work, healthy=True, written=self._health)
        return DONE
