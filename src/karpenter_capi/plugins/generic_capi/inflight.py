"""The launches this process has under way: what it told the core that the API does not show
yet, and which NodeClaim a Machine's event should wake.

The API is the truth for every launch decision (``launch``), with two gaps this module fills
from memory, never in place of the API:

1. **Intents not written yet.** ``create`` names the resource a NodeClaim waits on in its
   result; the core writes it on the NodeClaim after the call returns. Until it has, another
   call reading the NodeClaims would count that NodeClaim nowhere: it would bind the Machine
   made for it, and the NodeClaim would only ask again on its next poll (issue 13: every node
   after the first of a MachineDeployment came one poll late). So every intent handed to the
   core is remembered here (``intend``) until the NodeClaim is bound, gives up or goes, and
   ``launch`` counts a NodeClaim the API shows without an intent (or with an older one) as
   waiting where this process last sent it. Only NodeClaims the API still shows waiting are
   counted, so a deleted or launched NodeClaim is never counted from memory, and a restart,
   which forgets everything here, falls back to the annotations.
2. **Whom to wake.** The core asks the plugin, for each Machine event, which NodeClaims' launch
   it may have moved (``karpenter_capi_launch_watches``). A Machine bound to a NodeClaim that
   waits for its provider ID wakes that NodeClaim when the Machine gets one, fails or goes. A
   new free Machine wakes one NodeClaim waiting on its resource: the oldest not already woken
   for another Machine and not newer than the Machine (``binding.match``'s rule), so N new
   Machines wake N NodeClaims, not N times N. A wake is pending until that NodeClaim's next
   ``create`` (``ran``) or for ``WAKE_PENDING`` seconds, after which the Machine may wake
   another. NodeClaims this process has not seen since it started are not woken; their poll
   finds their Machine, as it always did.

3. **NodeClaims deleted.** A NodeClaim whose delete this process has handled is remembered
   for ``DELETED_KEPT`` seconds (``deleted``) and counted nowhere in that time, whatever a
   copy of the NodeClaims says: the copy is fed by a watch and may show the NodeClaim as it
   was before its deletion for seconds on a loaded machine, and a NodeClaim counted waiting
   there raised the replicas once more for a NodeClaim that was gone (an extra Node, issue
   25). A ``create`` still running for it when it went does not bring its intent back.

Also kept: the resources whose scale-up a NodeClaim left to the last NodeClaim of its round
(``defer``, see ``launch``), so that the one that closes the round raises them all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Final

from karpenter_capi.plugins.generic_capi.binding import ClaimFacts, MachineFacts
from karpenter_capi.plugins.generic_capi.scaling import owner_of

WAKE_PENDING: Final = 10.0
"""Seconds a wake-up for a free Machine waits for its NodeClaim's ``create`` before the Machine
may wake another NodeClaim (one that was woken but never reconciled, because it went)."""


DELETED_KEPT: Final = 600.0
"""Seconds a deleted NodeClaim is remembered (a copy that lags longer lists anyway)."""


@dataclass(frozen=True)
class _Wake:
    claim: str
    at: float


class LaunchesInFlight:
    """Thread-safe memory of the launches this process answered without a provider ID."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._intents: dict[str, str] = {}
        """NodeClaim name -> the key of the resource it waits on for a Machine."""
        self._by_resource: dict[str, dict[str, ClaimFacts]] = {}
        """The same by resource key: NodeClaim name -> its facts when it was sent there."""
        self._bound: set[str] = set()
        """NodeClaims bound to a Machine that has no provider ID yet."""
        self._deferred: dict[str, set[str]] = {}
        """Resource key -> NodeClaims that left its scale-up to the end of their round."""
        self._wakes: dict[str, _Wake] = {}
        """Machine key -> the NodeClaim it woke."""
        self._deleted: dict[str, float] = {}
        """NodeClaim uid (name without one) -> when its delete was handled (``deleted``)."""

    # --- what create answered -------------------------------------------------------------------

    def intend(self, claim: ClaimFacts, resource: str) -> None:
        """``claim`` waits on ``resource`` (its result says so; the API may not yet)."""
        with self._lock:
            if self._gone(claim.uid or claim.name):
                return  # deleted while this call ran: not brought back
            previous = self._intents.get(claim.name)
            if previous is not None and previous != resource:
                self._drop_intent(claim.name)
            self._intents[claim.name] = resource
            self._by_resource.setdefault(resource, {})[claim.name] = claim
            self._bound.discard(claim.name)

    def bound(self, name: str) -> None:
        """``name`` has a Machine and waits for its provider ID."""
        with self._lock:
            self._drop_intent(name)
            self._bound.add(name)

    def done(self, name: str) -> None:
        """``name`` launched, gave up or went: forget it."""
        with self._lock:
            self._drop_intent(name)
            self._bound.discard(name)
            self._drop_wakes(name)

    def deleted(self, name: str, uid: str) -> None:
        """``name`` (``uid``) is deleted: forget it, and count it nowhere for ``DELETED_KEPT``
        seconds whatever a copy of the NodeClaims shows (module docstring)."""
        now = self._monotonic()
        with self._lock:
            self._drop_intent(name)
            self._bound.discard(name)
            self._drop_wakes(name)
            for key in [k for k, at in self._deleted.items() if now - at >= DELETED_KEPT]:
                del self._deleted[key]
            self._deleted[uid or name] = now

    def was_deleted(self, claim: ClaimFacts) -> bool:
        """Whether ``claim``'s delete was handled within ``DELETED_KEPT`` seconds."""
        with self._lock:
            return self._gone(claim.uid or claim.name)

    def _gone(self, key: str) -> bool:
        at = self._deleted.get(key)
        return at is not None and self._monotonic() - at < DELETED_KEPT

    def ran(self, name: str) -> None:
        """``create`` runs for ``name``: the wake-ups that named it are spent."""
        with self._lock:
            self._drop_wakes(name)

    def _drop_intent(self, name: str) -> None:
        previous = self._intents.pop(name, None)
        if previous is None:
            return
        self._undefer(previous, name)
        claims = self._by_resource.get(previous)
        if claims is not None:
            claims.pop(name, None)
            if not claims:
                del self._by_resource[previous]

    def _drop_wakes(self, name: str) -> None:
        for machine in [m for m, wake in self._wakes.items() if wake.claim == name]:
            del self._wakes[machine]

    # --- what launch reads ----------------------------------------------------------------------

    def intent_of(self, name: str) -> str | None:
        with self._lock:
            return self._intents.get(name)

    def intents_on(self, resource: str) -> dict[str, ClaimFacts]:
        """The NodeClaims this process last sent to ``resource``, by name."""
        with self._lock:
            return dict(self._by_resource.get(resource, {}))

    def has_intent(self, name: str) -> bool:
        with self._lock:
            return name in self._intents

    # --- scale-ups left to the end of a round ---------------------------------------------------

    def defer(self, resource: str, name: str) -> None:
        with self._lock:
            self._deferred.setdefault(resource, set()).add(name)

    def deferred(self) -> list[str]:
        """Resources with a scale-up left to the end of a round, in a stable order."""
        with self._lock:
            return sorted(self._deferred)

    def covered(self, resource: str, names: Collection[str] | None) -> None:
        """The replicas of ``resource`` now count ``names`` (``None``: every NodeClaim that
        deferred there, whose own next call raises them if they still fall short)."""
        with self._lock:
            if names is None:
                self._deferred.pop(resource, None)
                return
            for name in names:
                self._undefer(resource, name)

    def _undefer(self, resource: str, name: str) -> None:
        names = self._deferred.get(resource)
        if names is not None:
            names.discard(name)
            if not names:
                del self._deferred[resource]

    # --- wake-ups -------------------------------------------------------------------------------

    def to_wake(self, machine: MachineFacts) -> list[str]:
        """The NodeClaims an event of ``machine`` (as it is now) should wake."""
        if machine.claim:
            with self._lock:
                waiting = machine.claim in self._bound or machine.claim in self._intents
            news = bool(machine.provider_id) or machine.failed or machine.deleting
            return [machine.claim] if waiting and news else []
        owner = owner_of(machine)
        if owner is None or not machine.free:
            return []
        now = self._monotonic()
        with self._lock:
            wake = self._wakes.get(machine.key)
            if wake is not None and now - wake.at < WAKE_PENDING:
                return [wake.claim]
            busy = {w.claim for w in self._wakes.values() if now - w.at < WAKE_PENDING}
            candidates = sorted(
                (
                    facts
                    for facts in self._by_resource.get(owner.key, {}).values()
                    if facts.name not in busy and facts.created <= machine.created
                ),
                key=lambda facts: facts.order,
            )
            if not candidates:
                return []
            chosen = candidates[0].name
            self._wakes[machine.key] = _Wake(chosen, now)
            return [chosen]
