"""The two termination controllers: one finalizes Nodes, the other NodeClaims.

Deleting a Node or a NodeClaim must end with the pods moved elsewhere, the machine gone and
both objects removed, whichever of the two a user, the disruption controller or Cluster API
deleted first. Each object carries the ``karpenter.sh/termination`` finalizer so it waits for
that work; the split follows upstream Karpenter (``node/termination``, ``nodeclaim/lifecycle``):

* **NodeTerminationController** (primary: Node) deletes the Node's NodeClaim if it is not
  deleting yet, taints the Node ``karpenter.sh/disrupted:NoSchedule``, drains it step by step
  (``drain.py``) against the NodeClaim's termination deadline, calls the delete hook until the
  plugin reports the machine gone, then removes the Node's finalizer.
* **NodeClaimTerminationController** (primary: NodeClaim) records the deadline annotation,
  deletes the NodeClaim's Node (which starts the flow above) and waits for it to go, then makes
  sure the machine is gone (the only step for a NodeClaim that never got a Node) and removes the
  NodeClaim's finalizer.

So the Node always goes before its NodeClaim, the machine before either, and the NodeClaim is
there throughout the drain to supply the deadline and to be handed to the delete hook.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.meta import ConditionStatus
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.clock import format_timestamp
from karpenter_capi.core.errors import InstanceNotFoundError, ProviderError
from karpenter_capi.core.kube.cache import Store
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.errors import Conflict, NotFound
from karpenter_capi.core.kube.events import WARNING
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES, PODS, Resource
from karpenter_capi.core.observability.logs import ref
from karpenter_capi.core.plugin_host import PluginError
from karpenter_capi.core.runtime.controller import (
    DONE,
    WORKLOAD,
    ControllerContext,
    Key,
    Result,
    Watch,
)
from karpenter_capi.core.termination.actions import Actions, condition_of, set_condition
from karpenter_capi.core.termination.drain import FORCED_REASON, Drainer
from karpenter_capi.core.termination.instance import (
    InstanceTerminator,
    SaidOnce,
    instance_termination_seconds,
)
from karpenter_capi.core.termination.relations import (
    creation_time,
    deletion_time,
    has_termination_finalizer,
    is_deleting,
    label_of,
    name_of,
    node_name_of_nodeclaim,
    nodeclaims_for_node,
    nodes_for_nodeclaim,
    pods_on_node,
    provider_id_of_node,
    termination_deadline,
)

# After a write whose resourceVersion precondition failed: read again soon.
CONFLICT_RETRY_SECONDS: Final = 1.0
# A Node whose NodeClaim cannot be found (or is ambiguous) cannot be finalized safely; an
# operator has to step in, so only look again now and then.
ORPHAN_RECHECK_SECONDS: Final = 60.0
# The NodeClaim waits for its Node through the Node watch; this only bounds a missed event.
NODE_WAIT_RECHECK_SECONDS: Final = 30.0

# Under dry run nothing changes between reconciles; there is no hurry to look again.
DRY_RUN_RECHECK_SECONDS: Final = 60.0
# The same Warning Event is recorded on a Node again at most this often.
EVENT_REPEAT_SECONDS: Final = 60.0

DRAINED: Final = "Drained"
"""Upstream's NodeClaim condition for a finished drain (not in ``NodeClaimConditionType``)."""


def _ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def _disruption_reason(nodeclaim: Mapping[str, Any]) -> str:
    condition = condition_of(nodeclaim, NodeClaimConditionType.DISRUPTION_REASON.value)
    if condition is not None and condition.get("status") == "True" and condition.get("reason"):
        return str(condition["reason"])
    return FORCED_REASON


def _seconds_since(obj: Mapping[str, Any], moment: str, now_seconds: float) -> float | None:
    stamp = creation_time(obj) if moment == "created" else deletion_time(obj)
    return None if stamp is None else max(0.0, now_seconds - stamp.timestamp())


class NodeTerminationController:
    """Finalizes deleting Nodes: cordon, drain, delete the machine, drop the finalizer."""

    name = "node.termination"
    primary: Resource = NODES
    primary_cluster = WORKLOAD

    def __init__(self, ctx: ControllerContext) -> None:
        self._ctx = ctx
        self._log = ctx.log.getChild("termination.node")
        self._actions = Actions(ctx, self._log)
        self._drainer = Drainer(self._actions, ctx.clock, ctx.metrics, self._log)
        self._instances = InstanceTerminator(ctx.plugins, self._actions, ctx.clock, self._log)
        self._lock = threading.Lock()
        self._announced: set[str] = set()
        self._failures: dict[str, tuple[str, float]] = {}
        self._said = SaidOnce()

    # --- wiring ---------------------------------------------------------------------------------

    def watches(self) -> Sequence[Watch]:
        return [
            Watch(PODS, self._pod_to_node),
            Watch(NODECLAIMS, self._nodeclaim_to_nodes),
        ]

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return []

    def _store(self, resource: Resource) -> Store[JsonObject]:
        return self._ctx.caches.store(resource, WORKLOAD)

    def _pod_to_node(self, pod: JsonObject) -> Iterable[Key]:
        # Only pods of nodes being drained matter; every other pod event is dropped here.
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not isinstance(node_name, str) or not node_name:
            return ()
        node = self._store(NODES).get(node_name)
        return (node_name,) if node is not None and is_deleting(node) else ()

    def _nodeclaim_to_nodes(self, nodeclaim: JsonObject) -> Iterable[Key]:
        if not is_deleting(nodeclaim):
            return ()
        nodes = nodes_for_nodeclaim(nodeclaim, self._store(NODES))
        return [name_of(node) for node in nodes if is_deleting(node)]

    # --- reconcile ------------------------------------------------------------------------------

    def reconcile(self, key: Key) -> Result:
        node = self._store(NODES).get(key)
        if node is None or not is_deleting(node) or not has_termination_finalizer(node):
            self._forget(key)
            return DONE
        claims = nodeclaims_for_node(node, self._store(NODECLAIMS))
        if len(claims) != 1:
            return self._orphan(node, claims)
        claim = self._delete_claim_with_node(key, claims[0])
        deadline = self._deadline(node, claim)

        # A dead node whose machine is gone has nothing left to drain: its pods cannot run.
        if _ready(node) or not self._instance_missing(node):
            drained = self._drain(node, claim, deadline)
            if isinstance(drained, Result):
                return drained
            claim = drained
        else:
            self._log.info("node %s is not ready and its instance is gone: not draining", key)
        return self._terminate_instance(node, claim)

    def _delete_claim_with_node(self, key: Key, claim: JsonObject) -> JsonObject:
        """The Node went first: its NodeClaim follows, so both stay consistent."""
        if is_deleting(claim):
            return claim
        deleted = self._actions.delete(NODECLAIMS, name_of(claim))
        if deleted is None:
            return claim
        self._log.info("node %s is deleting: deleted its nodeclaim %s", key, name_of(claim))
        return deleted

    def _deadline(self, node: JsonObject, claim: JsonObject) -> datetime | None:
        """The claim's termination grace deadline, announced once on the node; a malformed
        grace period is logged once and treated as none."""
        deadline, problem = termination_deadline(claim)
        if problem and self._said.first(name_of(claim), problem):
            self._log.warning("nodeclaim %s: %s", name_of(claim), problem)
        if deadline is not None:
            self._announce(node, deadline_text=format_timestamp(deadline))
        return deadline

    def _drain(
        self, node: JsonObject, claim: JsonObject, deadline: datetime | None
    ) -> JsonObject | Result:
        """Taint and drain the node: the claim marked Drained, or the Result to return while
        the drain is still under way (or lost a write race)."""
        key = name_of(node)
        try:
            self._drainer.taint(node)
        except Conflict:
            return Result(requeue_after=CONFLICT_RETRY_SECONDS)
        except NotFound:
            return DONE
        pods = pods_on_node(key, self._store(PODS))
        drain = self._drainer.drain(key, pods, deadline, reason=_disruption_reason(claim))
        if not drain.drained:
            if drain.problems:
                message = "Failed to drain node, " + "; ".join(drain.problems)
                self._warn(node, "FailedDraining", message)
            self._set_drained(claim, ConditionStatus.UNKNOWN, "Draining")
            return Result(requeue_after=drain.requeue_after)
        drained = self._set_drained(claim, ConditionStatus.TRUE, DRAINED)
        if drained is None:
            return Result(requeue_after=CONFLICT_RETRY_SECONDS)
        return drained

    def _terminate_instance(self, node: JsonObject, claim: JsonObject) -> Result:
        """Delete the machine behind the claim, then release the node once it is gone."""
        try:
            instance = self._instances.ensure_terminated(claim)
        except (ProviderError, PluginError) as error:
            self._log.warning("node %s: deleting the instance failed: %s", name_of(node), error)
            raise
        if not instance.gone:
            return Result(requeue_after=instance.requeue_after)
        return self._finish(node)

    def _orphan(self, node: JsonObject, claims: list[JsonObject]) -> Result:
        if not claims and not self._ctx.caches.has_synced():
            return Result(requeue_after=CONFLICT_RETRY_SECONDS)
        # Removing the finalizer without a NodeClaim would delete the Node while its machine
        # may still run, and its kubelet would register it again: an operator decides.
        found = ", ".join(name_of(c) for c in claims) or "none"
        message = (
            f"cannot terminate node: expected exactly one NodeClaim with providerID "
            f"{provider_id_of_node(node)!r}, found {found}"
        )
        self._log.warning("node %s: %s", name_of(node), message)
        self._warn(node, "FailedTermination", message)
        return Result(requeue_after=ORPHAN_RECHECK_SECONDS)

    def _instance_missing(self, node: Mapping[str, Any]) -> bool:
        """Whether the machine behind a node is known to be gone (only asked of NotReady
        nodes: a Ready node's kubelet is evidently still running somewhere)."""
        provider_id = provider_id_of_node(node)
        if not provider_id:
            return False
        try:
            self._ctx.plugins.get(provider_id)
        except InstanceNotFoundError:
            return True
        except (ProviderError, PluginError) as error:
            self._log.warning("looking up instance %s failed: %s", provider_id, error)
        return False

    def _announce(self, node: JsonObject, *, deadline_text: str) -> None:
        with self._lock:
            if name_of(node) in self._announced:
                return
            self._announced.add(name_of(node))
        self._actions.event(
            NODES,
            node,
            WARNING,
            "TerminationGracePeriodExpiring",
            f"All pods will be deleted by {deadline_text}",
        )

    def _warn(self, node: JsonObject, reason: str, message: str) -> None:
        # The recorder folds repeats into one Event, but each repeat is still a write; a pod
        # blocked for hours would bump the count on every recheck.
        now = self._ctx.clock.monotonic()
        with self._lock:
            last = self._failures.get(name_of(node))
            if last is not None and last[0] == message and now - last[1] < EVENT_REPEAT_SECONDS:
                return
            self._failures[name_of(node)] = (message, now)
        self._actions.event(NODES, node, WARNING, reason, message)

    def _set_drained(
        self, claim: JsonObject, status: ConditionStatus, reason: str
    ) -> JsonObject | None:
        """Record drain progress on the NodeClaim; the NodeClaim as it now is, or ``None``
        when the write conflicted."""
        was_drained = (condition_of(claim, DRAINED) or {}).get("status") == "True"
        conditions = set_condition(
            claim, DRAINED, status, reason=reason, message="", now=self._ctx.clock.now()
        )
        if conditions is None:
            return claim
        try:
            patched = self._actions.patch(
                NODECLAIMS,
                claim,
                {"status": {"conditions": conditions}},
                subresource="status",
                what=f"set condition {DRAINED}={status.value}",
            )
        except NotFound:
            return claim
        except Conflict:
            return None
        if patched is None:  # dry run
            return claim
        if status is ConditionStatus.TRUE and not was_drained:
            self._log.debug("drained node %s", node_name_of_nodeclaim(claim) or name_of(claim))
            if self._ctx.metrics is not None:
                self._ctx.metrics.node_drained(_nodepool(claim))
        # Later writes in this reconcile need the new resourceVersion.
        return patched

    def _finish(self, node: JsonObject) -> Result:
        try:
            removed = self._actions.remove_finalizer(NODES, node, wellknown.FINALIZER_TERMINATION)
        except Conflict:
            return Result(requeue_after=CONFLICT_RETRY_SECONDS)
        if not removed:  # dry run
            return Result(requeue_after=DRY_RUN_RECHECK_SECONDS)
        now = self._ctx.clock.now().timestamp()
        if self._ctx.metrics is not None:
            self._ctx.metrics.node_terminated(
                _nodepool(node),
                zone=label_of(node, wellknown.LABEL_TOPOLOGY_ZONE),
                duration_seconds=_seconds_since(node, "deleted", now) or 0.0,
                lifetime_seconds=_seconds_since(node, "created", now),
            )
        self._log.info("deleted node", extra={"Node": ref(name_of(node))})
        self._forget(name_of(node))
        return DONE

    def _forget(self, node_name: str) -> None:
        self._drainer.forget(node_name)
        with self._lock:
            self._announced.discard(node_name)
            self._failures.pop(node_name, None)


def _nodepool(obj: Mapping[str, Any]) -> str:
    return label_of(obj, wellknown.LABEL_NODEPOOL)


class NodeClaimTerminationController:
    """Finalizes deleting NodeClaims: deadline, Node first, then machine, then finalizer."""

    name = "nodeclaim.termination"
    primary: Resource = NODECLAIMS
    primary_cluster = WORKLOAD

    def __init__(self, ctx: ControllerContext) -> None:
        self._ctx = ctx
        self._log = ctx.log.getChild("termination.nodeclaim")
        self._actions = Actions(ctx, self._log)
        self._instances = InstanceTerminator(ctx.plugins, self._actions, ctx.clock, self._log)
        self._said = SaidOnce()

    def watches(self) -> Sequence[Watch]:
        return [Watch(NODES, self._node_to_nodeclaims)]

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return []

    def _store(self, resource: Resource) -> Store[JsonObject]:
        return self._ctx.caches.store(resource, WORKLOAD)

    def _node_to_nodeclaims(self, node: JsonObject) -> Iterable[Key]:
        # A NodeClaim waits for its Node to go: the Node's last events wake it.
        if not is_deleting(node):
            return ()
        claims = nodeclaims_for_node(node, self._store(NODECLAIMS))
        return [name_of(claim) for claim in claims if is_deleting(claim)]

    def reconcile(self, key: Key) -> Result:
        claim = self._store(NODECLAIMS).get(key)
        if claim is None or not is_deleting(claim) or not has_termination_finalizer(claim):
            return DONE
        try:
            claim = self._annotate_deadline(claim)
        except Conflict:
            return Result(requeue_after=CONFLICT_RETRY_SECONDS)

        nodes = nodes_for_nodeclaim(claim, self._store(NODES))
        # Nodes with our finalizer are drained by the Node controller before they go.
        draining = [node for node in nodes if has_termination_finalizer(node)]
        for node in draining:
            if not is_deleting(node) and self._actions.delete(NODES, name_of(node)) is not None:
                self._log.info("nodeclaim %s is deleting: deleted node %s", key, name_of(node))
        if draining:
            return Result(requeue_after=NODE_WAIT_RECHECK_SECONDS)

        instance = self._instances.ensure_terminated(claim)
        if not instance.gone:
            return Result(requeue_after=instance.requeue_after)
        # A Node that never got our finalizer was not drained; with the machine gone its
        # kubelet cannot register it again, so it can go now (upstream does the same).
        for node in nodes:
            if not is_deleting(node) and self._actions.delete(NODES, name_of(node)) is not None:
                self._log.info("deleted node %s of terminated nodeclaim %s", name_of(node), key)
        return self._finish(claim)

    def _annotate_deadline(self, claim: JsonObject) -> JsonObject:
        """Record the termination deadline on the NodeClaim once, as upstream does, so every
        reader (and a restarted controller) agrees on it. Raises ``Conflict``."""
        annotations = (claim.get("metadata") or {}).get("annotations") or {}
        if wellknown.ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP in annotations:
            return claim
        deadline, problem = termination_deadline(claim)
        if problem and self._said.first(name_of(claim), problem):
            self._log.warning("nodeclaim %s: %s", name_of(claim), problem)
        if deadline is None:
            return claim
        stamp = format_timestamp(deadline)
        patched = self._actions.patch(
            NODECLAIMS,
            claim,
            {
                "metadata": {
                    "annotations": {wellknown.ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP: stamp}
                }
            },
            what=f"annotate {wellknown.ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP}={stamp}",
        )
        if patched is not None:
            self._log.info("nodeclaim %s: all pods will be deleted by %s", name_of(claim), stamp)
        self._actions.event(
            NODECLAIMS,
            claim,
            WARNING,
            "TerminationGracePeriodExpiring",
            f"All pods will be deleted by {stamp}",
        )
        return patched if patched is not None else claim

    def _finish(self, claim: JsonObject) -> Result:
        try:
            removed = self._actions.remove_finalizer(
                NODECLAIMS, claim, wellknown.FINALIZER_TERMINATION
            )
        except Conflict:
            return Result(requeue_after=CONFLICT_RETRY_SECONDS)
        if not removed:  # dry run
            return Result(requeue_after=DRY_RUN_RECHECK_SECONDS)
        self._said.forget(name_of(claim))
        now = self._ctx.clock.now()
        instance_seconds = instance_termination_seconds(claim, now)
        metrics = self._ctx.metrics
        if metrics is not None:
            if instance_seconds is not None:
                metrics.observe_instance_termination(_nodepool(claim), instance_seconds)
            metrics.nodeclaim_terminated(
                _nodepool(claim),
                capacity_type=label_of(claim, wellknown.LABEL_CAPACITY_TYPE),
                zone=label_of(claim, wellknown.LABEL_TOPOLOGY_ZONE),
                duration_seconds=_seconds_since(claim, "deleted", now.timestamp()) or 0.0,
            )
        self._log.info(
            "deleted nodeclaim",
            extra={
                "NodeClaim": ref(name_of(claim)),
                "Node": ref(node_name_of_nodeclaim(claim) or ""),
                "provider-id": str((claim.get("status") or {}).get("providerID") or ""),
            },
        )
        return DONE
