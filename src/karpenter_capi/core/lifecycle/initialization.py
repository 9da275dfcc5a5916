"""Initialization: decide when a registered Node is really ready for the pods it was made for.

A Node's ``Ready`` condition says the kubelet runs, not that the node is usable: agents still
hold their startup taints (a CNI, a GPU driver), the node lifecycle controller's ephemeral
taints may linger, and device plugins register extended resources (``nvidia.com/gpu``) only
after a while. Until all of that is done the scheduler would refuse the pods, so consolidation
and the provisioner must keep treating the node as still launching. ``Initialized`` goes True
(and with Launched and Registered, ``Ready``) only when:

1. the Node's ``Ready`` condition is True;
2. none of the NodeClaim's startup taints is left on it;
3. none of the known ephemeral taints (``node.kubernetes.io/not-ready``, ``.../unreachable``,
   ``node.cloudprovider.kubernetes.io/uninitialized``, ``karpenter.sh/unregistered``) is left;
4. every extended resource the NodeClaim requested is non-zero in the Node's allocatable.

Then the Node is labelled ``karpenter.sh/initialized=true``. Until then ``Initialized`` stays
Unknown with the first unmet point as reason, as upstream reports it.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.kube.resources import NODES
from karpenter_capi.core.lifecycle.launch import LAUNCHED
from karpenter_capi.core.lifecycle.metrics import LifecycleReporter
from karpenter_capi.core.lifecycle.nodes import (
    EPHEMERAL_TAINT_KEYS,
    format_taint,
    node_is_ready,
    node_taints,
    nodes_for_provider_id,
    taint_matches,
)
from karpenter_capi.core.lifecycle.registration import REGISTERED
from karpenter_capi.core.lifecycle.said import SaidOnce
from karpenter_capi.core.lifecycle.work import NodeClaimWork
from karpenter_capi.core.lifecycle.writes import Writes
from karpenter_capi.core.observability.logs import ref
from karpenter_capi.core.runtime.controller import DONE, ControllerContext, Result
from karpenter_capi.core.values.quantity import QuantityError
from karpenter_capi.core.values.resources import ResourceList

INITIALIZED: Final = str(NodeClaimConditionType.INITIALIZED)


def is_extended_resource(name: str) -> bool:
    """A resource a device plugin registers: domain-qualified and not ``kubernetes.io``'s."""
    domain, slash, _ = name.partition("/")
    return bool(slash) and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def unregistered_resource(work: NodeClaimWork, node: dict[str, Any]) -> str | None:
    """The first requested extended resource the Node does not offer yet, or None."""
    requests = work.model.spec.resources.requests
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for name in sorted(requests):
        if not is_extended_resource(name):
            continue
        try:
            wanted = ResourceList.parse({name: requests[name]})
            offered = ResourceList.parse({name: allocatable.get(name, "0")})
        except QuantityError:
            return name
        # The kubelet reports an extended resource as 0 until its device plugin registers.
        if not wanted.is_zero() and offered.is_zero():
            return name
    return None


class Initialization:
    """The initialization step of the NodeClaim lifecycle controller."""

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

    def _node(self, work: NodeClaimWork) -> dict[str, Any] | None:
        if work.node is not None:
            return work.node
        if not work.provider_id:
            return None
        nodes = nodes_for_provider_id(self._ctx.caches, work.provider_id)
        return nodes[0] if len(nodes) == 1 else None

    def reconcile(self, work: NodeClaimWork) -> Result:
        conditions = work.conditions
        if conditions.is_true(INITIALIZED):
            return DONE
        if not conditions.is_true(LAUNCHED):
            conditions.set_unknown(INITIALIZED, "NotLaunched", "Node not launched")
            return DONE
        node = self._node(work) if conditions.is_true(REGISTERED) else None
        if node is None:
            conditions.set_unknown(INITIALIZED, "NodeNotFound", "Node not registered with cluster")
            return DONE
        if not node_is_ready(node):
            conditions.set_unknown(INITIALIZED, "NodeNotReady", "Node status is NotReady")
            return DONE
        taints = node_taints(node)
        startup = (work.raw.get("spec") or {}).get("startupTaints") or []
        left = next((t for t in taints if any(taint_matches(t, s) for s in startup)), None)
        if left is not None:
            conditions.set_unknown(
                INITIALIZED,
                "StartupTaintsExist",
                f'StartupTaint "{format_taint(left)}" still exists',
            )
            return DONE
        ephemeral = next((t for t in taints if t.get("key") in EPHEMERAL_TAINT_KEYS), None)
        if ephemeral is not None:
            conditions.set_unknown(
                INITIALIZED,
                "KnownEphemeralTaintsExist",
                f'KnownEphemeralTaint "{format_taint(ephemeral)}" still exists',
            )
            return DONE
        missing = unregistered_resource(work, node)
        if missing is not None:
            conditions.set_unknown(
                INITIALIZED,
                "ResourceNotRegistered",
                f'Resource "{missing}" was requested but not registered',
            )
            return DONE
        labels = (node.get("metadata") or {}).get("labels") or {}
        if labels.get(wellknown.LABEL_INITIALIZED) != "true":
            # A map merge adds one key and cannot lose a concurrent change: no precondition.
            work.node = self._writes.patch(
                NODES, node, {"metadata": {"labels": {wellknown.LABEL_INITIALIZED: "true"}}}
            )
        conditions.set_true(INITIALIZED)
        # As registration: a retry after a lost conflict or over lagging caches says so only
        # at DEBUG.
        first = self._said.first(work.name, work.uid, "initialized")
        self._ctx.log.log(
            logging.INFO if first else logging.DEBUG,
            "initialized nodeclaim",
            extra={
                "NodeClaim": ref(work.name),
                "provider-id": work.provider_id,
                "Node": ref(str(node["metadata"]["name"])),
                "allocatable": (node.get("status") or {}).get("allocatable") or {},
            },
        )
        self._metrics.initialized(work.nodepool)
        return DONE
