"""The arithmetic of a launch, without I/O: which resources can serve a NodeClaim, which
NodeClaims wait on a resource, and how many replicas that resource should have.

Kept apart from ``launch`` (which reads and writes) because ``delete`` needs the same answers
to cancel a NodeClaim, and because these are the rules a restart must reproduce exactly: every
process that reads the same objects computes the same pairing and the same target, which is
what makes concurrent launches converge instead of counting a NodeClaim twice.

- ``waiting_claims``: the NodeClaims whose intent annotation names the resource, not deleting,
  without a provider ID or a bound Machine;
- ``make_plan``: pairs them with the free Machines (``binding.match``; Machines nobody claimed
  for ``unclaimed_ttl`` are adopted by the NodeClaims left over, see ``unclaimed``); the others
  need new replicas, as many as the max size leaves room for (oldest NodeClaims first); the
  replicas target is the Machines that stay (neither deleting nor marked) plus those;
- ``rank_candidates``: the resources behind the offerings the core allows, cheapest first.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from karpenter_capi.plugin_api import InstanceType, LaunchResult, Offering
from karpenter_capi.plugin_api.karpenter import DurationError, parse_duration
from karpenter_capi.plugins.generic_capi.binding import ClaimFacts, MachineFacts, match
from karpenter_capi.plugins.generic_capi.inventory import Inventory, UnavailableOfferings
from karpenter_capi.plugins.generic_capi.scaling import ResourceRef, ResourceState

log = logging.getLogger(__name__)

MACHINE_TIMEOUT_OPTION: Final = "machine_timeout"
CONFLICT_RETRIES_OPTION: Final = "conflict_retries"
ROUND_WINDOW_OPTION: Final = "round_window"
UNCLAIMED_TTL_OPTION: Final = "unclaimed_ttl"
DEFAULT_MACHINE_TIMEOUT: Final = 120.0
DEFAULT_CONFLICT_RETRIES: Final = 5
DEFAULT_ROUND_WINDOW: Final = 10.0
DEFAULT_UNCLAIMED_TTL: Final = 15 * 60.0
"""The core's registration TTL: no NodeClaim waits longer for its Machine to be bound."""


def parse_seconds(text: str) -> float:
    """``90``, ``1.5`` or ``1m30s`` as seconds."""
    try:
        value = float(text)
    except ValueError:
        return parse_duration(text.strip()).total_seconds()
    if not math.isfinite(value) or value < 0:
        raise DurationError(f"invalid duration {text!r}")
    return value


@dataclass(frozen=True)
class LaunchSettings:
    """``machine_timeout``: seconds a NodeClaim waits for a Machine of one resource before
    falling back to the next; ``conflict_retries``: fresh reads after a 409 before a call stops
    and leaves the NodeClaim waiting on its resource for its next poll; ``round_window``: how
    recent another NodeClaim without a resource must be for a new NodeClaim to leave its
    scale-up to the last of their round (``launch``). Plugin
    options ``generic_capi.machine_timeout`` (``90s``, ``2m``), ``generic_capi.conflict_retries``
    and ``generic_capi.round_window`` (``0`` scales at every first call, as before). The
    timeout must leave room in the core's launch timeout (5 minutes) for a fallback, and cover
    the time CAPI takes to create a Machine object (not to provision it: a bound Machine waits
    for its provider ID as long as the core lets it)."""

    machine_timeout: float = DEFAULT_MACHINE_TIMEOUT
    conflict_retries: int = DEFAULT_CONFLICT_RETRIES
    round_window: float = DEFAULT_ROUND_WINDOW
    unclaimed_ttl: float = DEFAULT_UNCLAIMED_TTL
    """Seconds after which a free Machine of an opted-in resource counts as unclaimed
    (``unclaimed``): adopted by a waiting NodeClaim, else removed."""

    def unclaimed_before(self, now: datetime) -> datetime:
        """Free Machines created before this moment are unclaimed."""
        return now - timedelta(seconds=self.unclaimed_ttl)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> LaunchSettings:
        timeout = seconds_option(options, MACHINE_TIMEOUT_OPTION, DEFAULT_MACHINE_TIMEOUT)
        window = seconds_option(options, ROUND_WINDOW_OPTION, DEFAULT_ROUND_WINDOW)
        unclaimed = seconds_option(options, UNCLAIMED_TTL_OPTION, DEFAULT_UNCLAIMED_TTL)
        retries = DEFAULT_CONFLICT_RETRIES
        raw = options.get(CONFLICT_RETRIES_OPTION)
        if raw:
            try:
                retries = max(1, int(raw))
            except ValueError:
                log.warning("ignoring option %s=%r: not an integer", CONFLICT_RETRIES_OPTION, raw)
        return cls(
            machine_timeout=timeout,
            conflict_retries=retries,
            round_window=window,
            unclaimed_ttl=unclaimed,
        )


def seconds_option(
    options: Mapping[str, str], name: str, default: float, logger: logging.Logger = log
) -> float:
    """A duration option in seconds; ``default`` when unset or not a duration (logged)."""
    raw = options.get(name)
    if not raw:
        return default
    try:
        return parse_seconds(raw)
    except DurationError:
        logger.warning("ignoring option %s=%r: not a duration", name, raw)
        return default


@dataclass(frozen=True)
class Candidate:
    """A resource that could make the NodeClaim, with the offering it would be."""

    ref: ResourceRef
    instance_type: str
    zone: str
    capacity_type: str
    price: float = 0.0
    offering: Offering | None = None

    def result(
        self, annotations: Mapping[str, str], provider_id: str | None = None
    ) -> LaunchResult:
        return LaunchResult(
            instance_type=self.instance_type,
            capacity_type=self.capacity_type,
            zone=self.zone or None,
            provider_id=provider_id or None,
            annotations=dict(annotations),
        )


def rank_candidates(
    instance_types: Sequence[InstanceType],
    inventory: Inventory,
    unavailable: UnavailableOfferings | None = None,
) -> list[Candidate]:
    """Every available resource behind the offerings the core allows, cheapest first.

    Ties are broken by the resource's own price, then instance type, zone, capacity type and
    resource key, so every process picks the same resource.
    """
    ranked: list[tuple[tuple[float, float, str, str, str, str], Candidate]] = []
    for instance_type in instance_types:
        for offering in instance_type.offerings:
            if not offering.available:
                continue
            for resource in inventory.resources_for(
                instance_type.name, offering.zone, offering.capacity_type
            ):
                if not resource.available or (
                    unavailable is not None and unavailable.is_unavailable(resource.key)
                ):
                    continue
                ref = ResourceRef(resource.kind, resource.namespace, resource.name)
                candidate = Candidate(
                    ref,
                    instance_type.name,
                    offering.zone,
                    offering.capacity_type,
                    offering.price,
                    offering,
                )
                order = (
                    offering.price,
                    resource.price,
                    instance_type.name,
                    offering.zone,
                    offering.capacity_type,
                    ref.key,
                )
                ranked.append((order, candidate))
    ranked.sort(key=lambda pair: pair[0])
    seen: set[str] = set()
    result = []
    for _, candidate in ranked:
        if candidate.ref.key not in seen:
            seen.add(candidate.ref.key)
            result.append(candidate)
    return result


def nothing_available(inventory: Inventory, limit: int = 5) -> str:
    """Why no resource was even tried: the unavailable ones and their reasons."""
    unavailable = [r for r in inventory.resources if not r.available]
    if not unavailable:
        return "no scalable resource offers the allowed instance types"
    listed = "; ".join(
        f"{r.kind} {r.namespace}/{r.name}: {r.unavailable_reason}" for r in unavailable[:limit]
    )
    more = f" (and {len(unavailable) - limit} more)" if len(unavailable) > limit else ""
    return f"no allowed offering is available: {listed}{more}"


@dataclass(frozen=True)
class Plan:
    """What one read of a resource says its replicas should be."""

    pairs: Mapping[str, MachineFacts]
    unmatched: Sequence[ClaimFacts]
    served: int
    target: int

    def serves(self, claim: ClaimFacts) -> bool:
        """Whether ``claim`` gets a Machine: a free one, or a replica within the max size."""
        if claim.name in self.pairs:
            return True
        names = [c.name for c in self.unmatched]
        return claim.name in names[: self.served]


def make_plan(
    state: ResourceState,
    waiting: Iterable[ClaimFacts],
    *,
    unclaimed_before: datetime | None = None,
) -> Plan:
    """Pair ``waiting`` with free Machines; the rest need new replicas, within the max size.

    With ``unclaimed_before``, the free Machines created before it are adopted by NodeClaims
    no newer Machine serves (``binding.match``)."""
    claims = sorted(waiting, key=lambda claim: claim.order)
    pairs = match(claims, state.machines, unclaimed_before=unclaimed_before)
    unmatched = [claim for claim in claims if claim.name not in pairs]
    alive = len(state.alive)
    max_size = state.max_size
    slots = len(unmatched) if max_size is None else max(0, max_size - alive)
    served = min(len(unmatched), slots)
    return Plan(pairs, unmatched, served, alive + served)


def waiting_claims(
    claims: Iterable[ClaimFacts],
    state: ResourceState,
    bound_elsewhere: AbstractSet[str],
    *,
    exclude: str = "",
) -> list[ClaimFacts]:
    """NodeClaims waiting on ``state``'s resource with no Machine bound (``exclude`` left out)."""
    bound_here = {m.claim for m in state.machines if m.claim and not m.deleting}
    return [
        claim
        for claim in claims
        if claim.name != exclude
        and claim.intent == state.ref.key
        and not claim.deleting
        and not claim.provider_id
        and claim.machine_ref is None
        and claim.name not in bound_here
        and claim.name not in bound_elsewhere
    ]
