"""What a static NodePool needs now: how many NodeClaims to create or delete, and which.

A static NodePool (``spec.replicas`` set) keeps a node count instead of following pending pods.
Three controllers act on it (static provisioning, static deprovisioning, static drift in the
disruption pass) and ``karpenter-capi explain`` reports on it; they must count and choose alike,
so the counting and the choosing live here, as pure functions over the objects already read.

The count follows upstream Karpenter's per-NodePool state: a NodeClaim is *deleting* once its
``deletionTimestamp`` is set, *pending disruption* while a disruption command holds it (its
``DisruptionReason`` condition, or the ``karpenter.sh/disrupted`` taint on its Node) and
*active* otherwise, launched or not. Scale-up fills ``replicas`` from the active ones, counting
those pending disruption as present (their replacements are already active);
``limits.nodes`` caps every NodeClaim of the pool, deleting ones included, so a pool at its
limit waits for old nodes to go before it launches new ones. Scale-down deletes active
NodeClaims beyond ``replicas``, in upstream's order: not launched yet first, then empty nodes
(DaemonSet pods only), then the cheapest to disrupt; a node with a ``do-not-disrupt`` pod last.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.disruption.candidates import (
    condition_true,
    lifetime_remaining,
    pod_blocks,
    rescheduling_cost,
)
from karpenter_capi.core.lifecycle.launch import launchable_instance_types
from karpenter_capi.core.provisioning.state import has_disrupted_taint, is_reschedulable
from karpenter_capi.core.scheduling.daemons import DaemonOverhead
from karpenter_capi.core.scheduling.podspec import PodObject
from karpenter_capi.core.scheduling.solver import DEFAULT_MAX_INSTANCE_TYPES
from karpenter_capi.core.scheduling.solver_io import NodePoolOption, ProposedNodeClaim
from karpenter_capi.core.values.requirements import Requirement
from karpenter_capi.core.values.resources import ResourceList

CREATE_PER_ROUND: Final = 100
"""Most NodeClaims one static round creates. The CRD admits any ``replicas`` (2^31-1 too) and
upstream creates every missing one at once, bounded by ``limits.nodes`` alone; a pool without
that limit would otherwise flood the API server and hold the controller in one reconcile."""
CAPPED_RETRY: Final = 10.0
"""Seconds between two rounds of a pool that had more to create than ``CREATE_PER_ROUND``."""

OVERPROVISIONED: Final = "Overprovisioned"
"""Why a static NodePool's surplus NodeClaim goes (upstream's ``overprovisioned``)."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def pool_of(claim: Mapping[str, Any]) -> str:
    """The NodePool a NodeClaim belongs to (its ``karpenter.sh/nodepool`` label)."""
    return str((_meta(claim).get("labels") or {}).get(wellknown.LABEL_NODEPOOL, ""))


@dataclass(frozen=True)
class StaticCount:
    """A NodePool's NodeClaims as the static controllers count them."""

    active: int = 0
    deleting: int = 0
    pending_disruption: int = 0

    @property
    def total(self) -> int:
        """Every NodeClaim of the pool: what ``limits.nodes`` caps."""
        return self.active + self.deleting + self.pending_disruption


def pending_disruption(claim: Mapping[str, Any], node: Mapping[str, Any] | None) -> bool:
    """Held by a disruption command (marked or tainted) and not deleting yet."""
    if _meta(claim).get("deletionTimestamp"):
        return False
    if condition_true(claim, NodeClaimConditionType.DISRUPTION_REASON):
        return True
    return node is not None and has_disrupted_taint(node)


def _nodes_by_name(nodes: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {_name(n): n for n in nodes}


def _node_of(
    claim: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    node_name = (claim.get("status") or {}).get("nodeName")
    return nodes.get(str(node_name)) if node_name else None


def count_nodeclaims(
    nodepool: str,
    nodeclaims: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]] = (),
) -> StaticCount:
    """Active, deleting and pending-disruption NodeClaims of ``nodepool``."""
    by_name = _nodes_by_name(nodes)
    active = deleting = pending = 0
    for claim in nodeclaims:
        if pool_of(claim) != nodepool:
            continue
        if _meta(claim).get("deletionTimestamp"):
            deleting += 1
        elif pending_disruption(claim, _node_of(claim, by_name)):
            pending += 1
        else:
            active += 1
    return StaticCount(active, deleting, pending)


def node_limit(pool: NodePool) -> int | None:
    """``spec.limits.nodes`` as a count, or None when the pool has no node limit."""
    raw = pool.spec.limits.get("nodes")
    if raw is None:
        return None
    return ResourceList.parse({"nodes": raw}).value("nodes")


def room_under_limit(pool: NodePool, count: StaticCount, wanted: int) -> int:
    """How many of ``wanted`` new NodeClaims ``limits.nodes`` allows now (never negative)."""
    limit = node_limit(pool)
    if limit is None:
        return max(wanted, 0)
    return max(min(wanted, limit - count.total), 0)


@dataclass(frozen=True)
class ReplicaPlan:
    """What a static NodePool needs now: ``create`` or ``delete`` NodeClaims (never both).

    ``held`` says why fewer NodeClaims than missing are created (``limits.nodes``), and
    ``limited`` when it is the per-round cap (``CREATE_PER_ROUND``).
    """

    nodepool: str
    replicas: int
    count: StaticCount
    create: int = 0
    delete: int = 0
    held: str = ""
    limited: str = ""

    def describe(self) -> str:
        """One line for a user: where the pool stands and what happens next."""
        state = (
            f"{self.count.active} of {self.replicas} replicas active"
            f", {self.count.pending_disruption} being replaced"
            f", {self.count.deleting} deleting"
        )
        if self.delete:
            return f"{state}: deleting {self.delete} NodeClaim(s)"
        steps = [f"creating {self.create} NodeClaim(s)"] if self.create else []
        steps += [s for s in (self.limited, self.held) if s]
        return f"{state}: {'; '.join(steps) or 'nothing to do'}"


def plan_replicas(
    pool: NodePool,
    nodeclaims: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]] = (),
) -> ReplicaPlan:
    """The replica arithmetic of upstream's static provisioning and deprovisioning."""
    replicas = pool.spec.replicas or 0
    count = count_nodeclaims(pool.name, nodeclaims, nodes)
    if count.active > replicas:
        return ReplicaPlan(pool.name, replicas, count, delete=count.active - replicas)
    if count.active + count.pending_disruption >= replicas:
        return ReplicaPlan(pool.name, replicas, count)
    wanted = replicas - count.active
    create = room_under_limit(pool, count, wanted)
    held = ""
    if create < wanted:
        held = (
            f"limits.nodes {node_limit(pool)} reached ({count.total} NodeClaims): "
            f"{wanted - create} replica(s) wait for NodeClaims to go"
        )
    limited = ""
    if create > CREATE_PER_ROUND:
        create = CREATE_PER_ROUND
        limited = (
            f"{replicas} replicas asked: NodeClaims are created at most {CREATE_PER_ROUND} "
            f"every {CAPPED_RETRY:g}s until they are reached; set limits.nodes to bound how many "
            "this NodePool may ever have"
        )
    return ReplicaPlan(pool.name, replicas, count, create=create, held=held, limited=limited)


# -- scale-down order ---------------------------------------------------------------------


def _active_pods(pods: Iterable[PodObject]) -> list[PodObject]:
    return [
        p
        for p in pods
        if not _meta(p).get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]


def _created(claim: Mapping[str, Any]) -> float:
    raw = _meta(claim).get("creationTimestamp")
    return parse_timestamp(str(raw)).timestamp() if raw else 0.0


@dataclass(frozen=True)
class ScaleDownChoice:
    """A NodeClaim chosen to go, and why it before the others (for the log and the Event)."""

    nodeclaim: Mapping[str, Any]
    why: str

    @property
    def name(self) -> str:
        return _name(self.nodeclaim)


def scale_down_choice(
    nodepool: str,
    count: int,
    *,
    nodeclaims: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    pods_by_node: Mapping[str, Sequence[PodObject]],
    now: datetime,
) -> list[ScaleDownChoice]:
    """The ``count`` active NodeClaims of ``nodepool`` to delete, in upstream's order.

    1. not launched yet (no provider ID), newest first: nothing runs there;
    2. empty: no pod but DaemonSet (or mirror) pods, none of them ``do-not-disrupt``;
    3. the rest by disruption cost (each reschedulable pod's cost times the share of its
       ``expireAfter`` the node has left), those with a ``do-not-disrupt`` pod last.

    Scale-down is what the user asked for, so a ``do-not-disrupt`` pod does not keep its node
    out of the choice; it only puts it last (the drain still waits for it, as for expiry).
    """
    if count <= 0:
        return []
    by_name = _nodes_by_name(nodes)
    active = [
        c
        for c in nodeclaims
        if pool_of(c) == nodepool
        and not _meta(c).get("deletionTimestamp")
        and not pending_disruption(c, _node_of(c, by_name))
    ]
    unresolved = sorted(
        (c for c in active if not (c.get("status") or {}).get("providerID")),
        key=lambda c: (-_created(c), _name(c)),
    )
    chosen = [ScaleDownChoice(c, "not launched yet") for c in unresolved[:count]]
    if len(chosen) == count:
        return chosen
    empty: list[tuple[int, str, Mapping[str, Any]]] = []
    busy: list[tuple[bool, float, str, Mapping[str, Any], int]] = []
    for claim in active:
        if not (claim.get("status") or {}).get("providerID"):
            continue
        node = _node_of(claim, by_name)
        pods = _active_pods(pods_by_node.get(_name(node), ())) if node is not None else []
        blocked = any(pod_blocks(p, now) is not None for p in pods)
        moving = [p for p in pods if is_reschedulable(p)]
        if not moving and not blocked:
            # A node not registered yet goes before a registered one.
            empty.append((0 if node is None else 1, _name(claim), claim))
            continue
        cost = sum(rescheduling_cost(p) for p in moving) * lifetime_remaining(claim, now)
        busy.append((blocked, cost, _name(claim), claim, len(moving)))
    for _, _, claim in sorted(empty, key=lambda e: (e[0], e[1])):
        if len(chosen) == count:
            return chosen
        chosen.append(ScaleDownChoice(claim, "empty"))
    for blocked, _, _, claim, moving_count in sorted(busy, key=lambda b: (b[0], b[1], b[2])):
        if len(chosen) == count:
            break
        why = f"{moving_count} pod(s) to move"
        chosen.append(
            ScaleDownChoice(claim, why + (", do-not-disrupt pods wait" if blocked else ""))
        )
    return chosen


# -- the NodeClaim a static pool launches ---------------------------------------------------


def static_nodeclaim(
    option: NodePoolOption, daemonsets: Iterable[Mapping[str, Any]] = ()
) -> ProposedNodeClaim | str:
    """The NodeClaim a static NodePool launches, or why it can launch none.

    No pod asks for it, so its requirements are the template's (and the template labels) and
    its requests are the DaemonSet pods that will run there. The instance types are every type
    those requirements allow that holds the DaemonSets, cheapest offering first, as the solver
    orders a dynamic NodeClaim's; launch takes the first it can get, so the cheapest compatible
    offering wins, and the ``instance-type In [...]`` requirement lets provisioning and
    disruption count the NodeClaim as capacity while it launches.
    """
    base = option.requirements.merged(
        [Requirement.new(wellknown.LABEL_NODEPOOL, "In", [option.name])]
    )
    requests = DaemonOverhead(daemonsets).for_node(base, option.taints)
    types = [
        t
        for t in launchable_instance_types(option.instance_types, base)
        if requests.fits(t.allocatable)
    ][:DEFAULT_MAX_INSTANCE_TYPES]
    if not types:
        return (
            f"NodePool {option.name}: no instance type meets its requirements "
            "and holds its DaemonSets"
        )
    requirements = base.with_requirement(
        Requirement.new(wellknown.LABEL_INSTANCE_TYPE, "In", [t.name for t in types])
    )
    return ProposedNodeClaim(
        nodepool=option,
        hostname="",
        requirements=requirements,
        instance_types=types,
        pods=[],
        requests=requests,
        daemon_requests=requests,
    )
