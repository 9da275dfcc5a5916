"""A NodeClass in a served workload cluster must launch into that cluster's own Cluster.

In fleet mode each workload cluster is served as one Cluster API ``Cluster``. A
ClusterAPINodeClass whose ``spec.launch`` names another Cluster (copied from a neighbour's
manifests, say) would launch nodes that join the wrong cluster, or be refused half-way by the
scoped management client. ``ClusterGuard`` stops it before any launch: registered ahead of the
enabled plugins in each member's ``Plugins``, its ``karpenter_capi_instance_types`` (tryfirst)
raises ``NodeClassNotReadyError`` for such a NodeClass, so no inventory and no launch come from
it, and writes ``Ready=False`` (reason ``ClusterMismatch``) with a message naming both Clusters
and the fields to set; it writes only when the condition differs, so once per change. A
NodeClass without ``spec.launch`` (the generic path) is left to the plugins: the scoped client
already shows it only this Cluster's scalable resources.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.clock import format_timestamp
from karpenter_capi.core.errors import NodeClassNotReadyError
from karpenter_capi.core.hookspecs import NodeClass, PluginContext, hookimpl
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES

log = logging.getLogger(__name__)

GUARD_PLUGIN: Final = "fleet-cluster-guard"
REASON_CLUSTER_MISMATCH: Final = "ClusterMismatch"


class ClusterGuard:
    """The hook that refuses a NodeClass launching into another Cluster than ``namespace/name``."""

    def __init__(self, namespace: str, name: str) -> None:
        self.namespace = namespace
        self.name = name

    def _refusal(self, nodeclass: NodeClass) -> tuple[ClusterAPINodeClass, str] | None:
        """``(nodeclass, why)`` it may not launch here, or ``None`` when it may."""
        if not isinstance(nodeclass, ClusterAPINodeClass) or nodeclass.spec.launch is None:
            return None
        launch = nodeclass.spec.launch
        if (launch.namespace, launch.cluster_name) == (self.namespace, self.name):
            return None
        return nodeclass, (
            f"spec.launch names Cluster {launch.namespace}/{launch.cluster_name}, but this "
            f"workload cluster is served as Cluster {self.namespace}/{self.name}: set "
            f"spec.launch.clusterName to {self.name!r} and spec.launch.namespace to "
            f"{self.namespace!r}; no node is launched through it until then"
        )

    @hookimpl(tryfirst=True)
    def karpenter_capi_instance_types(
        self, nodeclass: NodeClass, nodepool: Any, ctx: PluginContext
    ) -> None:
        refused = self._refusal(nodeclass)
        if refused is None:
            return
        model, message = refused
        name = model.metadata.name or ""
        self._mark(model, name, message, ctx)
        raise NodeClassNotReadyError(name, message)

    @hookimpl(tryfirst=True)
    def karpenter_capi_create(
        self, nodeclaim: Any, instance_types: Any, nodeclass: NodeClass, ctx: PluginContext
    ) -> None:
        # A NodeClaim made before the NodeClass was changed still reaches create: refuse it
        # here too, so not one node joins the wrong Cluster.
        refused = self._refusal(nodeclass)
        if refused is not None:
            model, message = refused
            raise NodeClassNotReadyError(model.metadata.name or "", message)

    def _mark(
        self, nodeclass: ClusterAPINodeClass, name: str, message: str, ctx: PluginContext
    ) -> None:
        ready = nodeclass.condition("Ready")
        if (
            ready is not None
            and not ready.is_true
            and ready.reason == REASON_CLUSTER_MISMATCH
            and ready.message == message
        ) or ctx.dry_run:
            return
        log.warning("ClusterAPINodeClass %s: %s", name, message)
        kept = [
            c.model_dump(mode="json", by_alias=True, exclude_none=True)
            for c in nodeclass.status.conditions
            if c.type != "Ready"
        ]
        condition = {
            "type": "Ready",
            "status": "False",
            "reason": REASON_CLUSTER_MISMATCH,
            "message": message,
            "lastTransitionTime": format_timestamp(ctx.clock.now()),
        }
        try:
            ctx.workload.patch(
                CLUSTER_API_NODE_CLASSES,
                name,
                {"status": {"conditions": [*kept, condition]}},
                subresource="status",
            )
        except ApiError as exc:
            log.warning("ClusterAPINodeClass %s: could not mark it not ready: %s", name, exc)


__all__ = ["GUARD_PLUGIN", "REASON_CLUSTER_MISMATCH", "ClusterGuard"]
