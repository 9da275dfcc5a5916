"""Static drift: replace a static NodePool's drifted nodes one for one, within its limits.

A static NodePool keeps ``spec.replicas`` nodes, so a drifted one is not simulated away as a
dynamic node is: it is replaced by a fresh NodeClaim from the template (launched, and
initialized, before the old one drains, as every replacement), as upstream Karpenter's
``StaticDrift`` does. Per NodePool, as many drifted candidates are replaced as both allow:

* the disruption budget for ``Drifted`` (what is already disrupting counts against it);
* ``limits.nodes``: a replacement is one more NodeClaim while the old one drains, so a pool at
  its limit replaces nothing until a node is gone, and one just under it replaces only as many
  as fit;
* a pool with more NodeClaims than ``replicas`` (a scale-down under way) waits for the surplus
  to go first, or it would replace nodes about to be deleted.

The cheapest candidates to disrupt go first. Expiration is not here: an expired static node is
deleted as any other (forceful, no budget) and static provisioning launches its successor,
within ``limits.nodes``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from karpenter_capi.core.api.nodepool import DisruptionReason
from karpenter_capi.core.disruption.budgets import BudgetLedger
from karpenter_capi.core.disruption.candidates import Candidate
from karpenter_capi.core.disruption.methods import Command, Outcome
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.provisioning.nodepools import nodepool_option
from karpenter_capi.core.provisioning.state import ClusterSnapshot
from karpenter_capi.core.scheduling.solver_io import ProposedNodeClaim
from karpenter_capi.core.static import plan as static_plan

STATIC_DRIFT: Final = "static-drift"


def static_drift(
    candidates: Sequence[Candidate],
    ledger: BudgetLedger,
    snapshot: ClusterSnapshot,
    inventories: Mapping[str, NodePoolInventory],
) -> Outcome:
    """One command replacing the drifted candidates of every static NodePool that may now."""
    by_pool: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        if candidate.drifted and candidate.pool.is_static:
            by_pool.setdefault(candidate.nodepool, []).append(candidate)
    if not by_pool:
        return None
    chosen: list[Candidate] = []
    replacements: list[ProposedNodeClaim] = []
    held: list[str] = []
    for name, drifted in sorted(by_pool.items()):
        room = _replaceable(name, drifted, ledger, snapshot, inventories.get(name))
        if isinstance(room, str):
            held.append(room)
            continue
        count, proposal = room
        for candidate in sorted(drifted, key=lambda c: (c.disruption_cost, c.name))[:count]:
            chosen.append(candidate)
            replacements.append(proposal)
        ledger.spend(name, count)
    if not chosen:
        return f"{sum(map(len, by_pool.values()))} drifted static node(s): {'; '.join(held)}"
    savings = sum(c.price for c in chosen) - sum(r.price for r in replacements)
    return Command(STATIC_DRIFT, DisruptionReason.DRIFTED, chosen, replacements, savings)


def _replaceable(
    name: str,
    drifted: Sequence[Candidate],
    ledger: BudgetLedger,
    snapshot: ClusterSnapshot,
    inventory: NodePoolInventory | None,
) -> tuple[int, ProposedNodeClaim] | str:
    """How many of a static pool's drifted nodes may be replaced now, and by what NodeClaim;
    or why none may (no budget, scaling down, at its node limit, unusable)."""
    pool = drifted[0].pool
    allowed = ledger.allowed(name, DisruptionReason.DRIFTED)
    if allowed <= 0:
        return f"NodePool {name}: no budget left"
    count = static_plan.count_nodeclaims(name, snapshot.nodeclaims, snapshot.nodes)
    replicas = pool.spec.replicas or 0
    if count.active + count.pending_disruption > replicas:
        return f"NodePool {name}: scaling down to {replicas} replicas first"
    room = static_plan.room_under_limit(pool, count, min(allowed, len(drifted)))
    if room <= 0:
        return (
            f"NodePool {name}: limits.nodes {static_plan.node_limit(pool)} leaves no room "
            "for a replacement"
        )
    if inventory is None or inventory.error:
        return f"NodePool {name}: not usable"
    proposal = static_plan.static_nodeclaim(
        nodepool_option(inventory, snapshot), snapshot.daemonsets
    )
    return proposal if isinstance(proposal, str) else (room, proposal)
