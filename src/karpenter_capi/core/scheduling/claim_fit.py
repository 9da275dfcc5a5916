"""Whether a proposed NodeClaim can take one more pod, and which of the first few is best.

Why a module of its own: these are the checks the greedy pass (``solver.py``) runs most, several
for every pod, and what they keep between pods (``ClaimState.seen``) is their own business: the
solver asks :meth:`ClaimFits._best_fit` for a claim and commits the answer. They are a mixin of
the solver's, not a class apart, because they read the solve's state (its topology, DaemonSets
and instance types) and tests count them on the solver.

The checks whose failure lasts (taints, ports, labels, room) come first and mark the claim as
never again for the pod's class; the topology, which can change as other pods land, comes last.
What a class finds on a claim depends only on the claim as it is, but for the topology's
verdict, so the claim keeps it until a pod lands on it: a class without topology constraints
keeps the whole answer; one with them keeps the checks before the topology's, and the answer
for when the topology leaves the claim's requirements as they are (most of the time: the claim
is in one domain already), so only the topology's verdict is asked again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.scheduling.claims import (
    ClaimState,
    CompatibleTypes,
    Fit,
    PodClass,
    Prepared,
    RuledOut,
    Vector,
    add,
    first_fit,
    fits,
    merged_requirements,
    min_values_problem,
    to_vector,
    tolerates_every_type,
    untolerated_pool_taint,
)
from karpenter_capi.core.scheduling.daemons import DaemonOverhead
from karpenter_capi.core.scheduling.podspec import PodSpec
from karpenter_capi.core.scheduling.topology import Topology
from karpenter_capi.core.values.refusal import Refusal
from karpenter_capi.core.values.resources import ResourceList

BALANCE_CANDIDATES: Final = 4

# Refusals whose text no user sees (the solver only asks whether there was one), made once so the
# hot path allocates nothing to say no.
TAINT: Final = Refusal("taint", permanent=True)
LABELS: Final = Refusal("labels", permanent=True)
RESOURCES: Final = Refusal("resources", permanent=True)
HOST_PORT: Final = Refusal("host port", permanent=True)
_NO_ROOM: Final = Refusal("no instance type can hold it with the pods already there")
_MIN_VALUES: Final = Refusal("minValues would no longer be met")


class ClaimFits:
    """The solver's checks of its proposed claims (see the module docstring)."""

    memo_fits: bool = True
    """Whether a claim keeps what a class found on it (``_fit_claim``); tests turn it off to
    compare with finding it again every time."""

    _topology: Topology | None
    _daemons: DaemonOverhead
    _compatible_types: CompatibleTypes
    _resources: tuple[str, ...]

    def _vector(self, resources: ResourceList) -> Vector:
        return to_vector(self._resources, resources)

    def _best_fit(
        self,
        claims: Iterable[ClaimState],
        pod_class: PodClass,
        spec: PodSpec,
        zones: frozenset[str] | None = None,
        elsewhere: RuledOut | None = None,
    ) -> Fit | None:
        """Of the first few claims that can take the pod, the one it leaves best balanced: with
        instance types of every shape, an unbalanced claim (all memory, little CPU) is what
        wastes money, and mixing memory-heavy and CPU-heavy pods is what avoids it.

        ``zones``: the only zones the pod's zonal pod affinity accepts, if known. The topology
        would refuse a claim held to others, after every other check and marking nothing, so
        it is passed over first, and recorded in ``elsewhere`` (the claims held to zones
        other than ``zones``) so that later pods accepting the same zones skip it unseen."""
        best: Fit | None = None
        best_score = 0.0
        seen = 0
        refusals = pod_class.unchanged_refusals
        memo = self.memo_fits
        for claim in claims:  # ruled-out claims are already left out (claim_window)
            if refusals and refusals.get(claim.index) == claim.version:
                continue
            if zones is not None:
                allowed = claim.requirements.get(wellknown.LABEL_TOPOLOGY_ZONE)
                if allowed is not None and not any(map(allowed.has, zones)):
                    if elsewhere is not None:
                        elsewhere.add(claim.index)
                    continue
            # A whole answer kept on the claim (a class without topology constraints) is
            # read here: most of such a class's checks, and a call each spared.
            fit = claim.seen.get(pod_class) if memo else None
            if not isinstance(fit, Fit):
                fit = self._fit_claim(claim, pod_class, spec)
                if not isinstance(fit, Fit):
                    continue
            cpu_max, memory_max = claim.pool.largest  # imbalance(), inlined
            total = fit.total
            score = abs(total[0] / cpu_max - total[1] / memory_max)
            if best is None or score < best_score:
                best, best_score = fit, score
            seen += 1
            if seen == BALANCE_CANDIDATES:
                break
        return best

    def _fit_claim(self, claim: ClaimState, pod_class: PodClass, spec: PodSpec) -> Fit | Refusal:
        """How ``claim`` would look with the pod on it, or why it cannot take the pod.

        The checks whose failure lasts (taints, ports, labels, room) come first and mark the
        claim as never again for this pod class; topology, which can change as other pods
        land, comes last and marks it only when its refusal is permanent.

        What a class's pods find on a claim depends only on the claim as it is, but for the
        topology's verdict: so the claim keeps it (``ClaimState.seen``) until a pod lands on it.
        A class without topology constraints gets the whole answer from there; one with them,
        the checks before the topology's.
        """
        known = claim.seen.get(pod_class) if self.memo_fits else None
        if known is None:
            prepared = self._prepare_fit(claim, pod_class)
            if isinstance(prepared, Refusal):
                return prepared
            if not pod_class.topological:
                answer = self._narrowed_fit(claim, pod_class, spec, prepared)
                if self.memo_fits:
                    claim.seen[pod_class] = answer
                return answer
            if self.memo_fits:
                claim.seen[pod_class] = prepared
        elif type(known) is tuple:
            prepared = known
        else:
            return known  # type: ignore[return-value]  # a Fit or a Refusal, kept whole
        return self._narrowed_fit(claim, pod_class, spec, prepared)

    def _prepare_fit(self, claim: ClaimState, pod_class: PodClass) -> Prepared | Refusal:
        """The checks of :meth:`_fit_claim` that read only the claim and the class."""
        rejected = pod_class.rejected_claims
        if untolerated_pool_taint(pod_class, claim.pool) is not None:
            rejected.add(claim.index)
            return TAINT
        if pod_class.host_ports and claim.ports.conflicts(pod_class.host_ports):
            rejected.add(claim.index)
            return HOST_PORT
        merged = merged_requirements(pod_class, claim.requirements)
        if isinstance(merged, Refusal):
            rejected.add(claim.index)
            return merged
        pods_total = add(claim.pods_total, pod_class.vector)
        total = add(pods_total, claim.daemon)
        fast = tolerates_every_type(pod_class, claim.pool)
        room = first_fit(claim.types, claim.first, total, pod_class, tolerated=fast)
        if room is None:
            # Narrowing only removes types and adds DaemonSets, so there will be no more room.
            rejected.add(claim.index)
            return _NO_ROOM
        return (merged, pods_total, total, room, fast, None)

    def _narrowed_fit(
        self, claim: ClaimState, pod_class: PodClass, spec: PodSpec, prepared: Prepared
    ) -> Fit | Refusal:
        """The rest of :meth:`_fit_claim`: the topology, then the types left after it."""
        assert self._topology is not None
        merged, pods_total, total, room, fast, kept = prepared
        current = claim.requirements
        narrowed = merged
        if pod_class.topological:
            topological = self._topology.add_requirements(
                spec, pod_class.required, merged, claim.taints, explain=False
            )
            if isinstance(topological, Refusal):
                if topological.permanent:
                    pod_class.topology_rejected.add(claim.index)
                elif topological.local:
                    pod_class.unchanged_refusals[claim.index] = claim.version
                return topological
            equal = topological is current or topological == current
            narrowed = current if equal else topological
        if narrowed is current and fast:
            if kept is not None:
                return kept  # found for an earlier pod of the class, the claim as it is now
            kept = self._unchanged_fit(claim, pods_total, total, room)
            if pod_class.topological and self.memo_fits:
                claim.seen[pod_class] = (merged, pods_total, total, room, fast, kept)
            return kept
        daemon = self._vector(self._daemons.for_node(narrowed, claim.taints))
        total = add(pods_total, daemon)
        allowed = {id(t) for t in self._compatible_types(claim.pool, narrowed, pod_class)}
        types = [
            t for t in claim.types[claim.first :] if id(t) in allowed and fits(total, t.allocatable)
        ]
        if not types:
            if not pod_class.topological:
                pod_class.rejected_claims.add(claim.index)
            return _NO_ROOM
        if claim.pool.min_values and min_values_problem(narrowed, types, total) is not None:
            return _MIN_VALUES
        return Fit(claim, narrowed, types, 0, pods_total, daemon, total)

    @staticmethod
    def _unchanged_fit(
        claim: ClaimState, pods_total: Vector, total: Vector, room: int
    ) -> Fit | Refusal:
        """The claim with the pod on it, its requirements and DaemonSets as they are: the
        cheapest type that holds it is ``room`` (:meth:`_prepare_fit`)."""
        types = claim.types
        if (
            claim.pool.min_values
            and min_values_problem(claim.requirements, types[room:], total) is not None
        ):
            return _MIN_VALUES
        return Fit(claim, claim.requirements, types, room, pods_total, claim.daemon, total)
