"""Launch rounds: how often a round of NodeClaims wrote each scalable resource's replicas, and
how long its last NodeClaim waited for a provider ID (issue 13, part 5).

A provisioning round creates its NodeClaims in one reconcile, so they share one creation time
on the virtual clock; that time names the round. A launch that works as designed raises each
scalable resource once per round, by the round's whole shortfall, and hands every NodeClaim
its provider ID as soon as its Machine has one, so the last NodeClaim of a round is no later
than the first by more than its Machine took. Pod latency alone hides both: a replica written
once per NodeClaim costs API writes, not seconds, and a NodeClaim that learns its provider ID a
poll late is only seen in the tail.

The figures come from the runtime's own informers (NodeClaims, MachineDeployments, MachineSets,
MachinePools), whose handlers run at the virtual time of each change in the stepped driver, so
they cost no API request. A replica write is an update that raises ``spec.replicas``; it counts
for a round when its resource is one the round's NodeClaims wait on (their
``karpenter.cluster.x-k8s.io/scalable-resource``) and it comes between the round's start and
the next round's, or the last provider ID of the round's NodeClaims on that resource.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.resources import (
    MACHINE_DEPLOYMENTS,
    MACHINE_POOLS,
    MACHINE_SETS,
    NODECLAIMS,
)
from karpenter_capi.core.runtime.controller import MANAGEMENT, WORKLOAD
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.plugins.generic_capi.binding import ANNOTATION_SCALABLE_RESOURCE
from karpenter_capi.sim.scenario.observer import percentile

JsonObject = Mapping[str, Any]


@dataclass
class _Claim:
    created_at: float
    resource: str = ""
    provider_at: float | None = None


@dataclass
class LaunchRounds:
    """Follows launches through a ``Manager``'s informers; ``figures()`` sums them up."""

    clock: Clock
    claims: dict[str, _Claim] = field(default_factory=dict)
    scale_ups: list[tuple[float, str]] = field(default_factory=list)
    """(virtual time, ``Kind/namespace/name``) of every write that raised replicas."""

    def attach(self, manager: Manager) -> None:
        """Register the handlers (before a driver takes the manager)."""
        manager.informer(NODECLAIMS, WORKLOAD).add_handler(
            on_add=self._claim, on_update=lambda _, new: self._claim(new)
        )
        for resource in (MACHINE_DEPLOYMENTS, MACHINE_SETS, MACHINE_POOLS):
            manager.informer(resource, MANAGEMENT).add_handler(on_update=self._scaled)

    def _claim(self, obj: JsonObject) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or meta.get("name"))
        claim = self.claims.get(uid)
        if claim is None:
            claim = self.claims[uid] = _Claim(self.clock.monotonic())
        resource = (meta.get("annotations") or {}).get(ANNOTATION_SCALABLE_RESOURCE)
        if resource:
            claim.resource = str(resource)
        if claim.provider_at is None and (obj.get("status") or {}).get("providerID"):
            claim.provider_at = self.clock.monotonic()

    def _scaled(self, old: JsonObject, new: JsonObject) -> None:
        before = (old.get("spec") or {}).get("replicas")
        after = (new.get("spec") or {}).get("replicas")
        if isinstance(before, int) and isinstance(after, int) and after > before:
            meta = new.get("metadata") or {}
            key = f"{new.get('kind')}/{meta.get('namespace')}/{meta.get('name')}"
            self.scale_ups.append((self.clock.monotonic(), key))

    def launched(self) -> int:
        """NodeClaims that got a provider ID during the run."""
        return sum(1 for claim in self.claims.values() if claim.provider_at is not None)

    def figures(self) -> dict[str, Any]:
        """``rounds``; ``replica_writes_per_resource`` (mean and max over each round's
        resources); ``last_provider_id_seconds`` (p50 and max over rounds whose NodeClaims all
        got one: from the round's start to its last provider ID); ``provider_id_spread_seconds``
        (max over those rounds: from its first provider ID to its last)."""
        rounds: dict[float, list[_Claim]] = {}
        for claim in self.claims.values():
            rounds.setdefault(claim.created_at, []).append(claim)
        starts = sorted(rounds)
        writes: list[float] = []
        last: list[float] = []
        spread: list[float] = []
        for index, start in enumerate(starts):
            members = rounds[start]
            following = starts[index + 1] if index + 1 < len(starts) else math.inf
            for resource in sorted({c.resource for c in members if c.resource}):
                mine = [c for c in members if c.resource == resource]
                ids = [c.provider_at for c in mine]
                end = following
                if all(at is not None for at in ids):
                    end = min(end, max(at for at in ids if at is not None) + 1e-9)
                writes.append(
                    sum(1 for at, key in self.scale_ups if key == resource and start <= at < end)
                )
            ids = [c.provider_at for c in members]
            if members and all(at is not None for at in ids):
                known = [at for at in ids if at is not None]
                last.append(max(known) - start)
                spread.append(max(known) - min(known))
        return {
            "rounds": len(starts),
            "replica_writes_per_resource": _summary(writes, ("mean", "max")),
            "last_provider_id_seconds": _summary(last, ("p50", "max")),
            "provider_id_spread_seconds": _summary(spread, ("max",)),
        }


def _summary(values: Sequence[float], names: tuple[str, ...]) -> dict[str, float]:
    if not values:
        return {}
    numbers = [float(value) for value in values]
    found = {
        "mean": sum(numbers) / len(numbers),
        "p50": percentile(numbers, 0.5),
        "max": max(numbers),
    }
    return {name: round(float(found[name]), 3) for name in names}
