"""The batching window: wait for a burst of pending pods to finish arriving, then solve once.

A Deployment scaled to 100 replicas creates its pods over a second or two; solving after the
first would launch a node for it alone. As upstream Karpenter, the window closes once no new
pod has appeared for ``idle`` seconds (default 1 s), or ``max_duration`` after it opened
(default 10 s) however busy it is, so a steady trickle cannot postpone provisioning for ever.

Beyond upstream, a burst can be known to be over before the second of quiet: when every new pod
of the window belongs to an owner (a ReplicaSet) that now has all the replicas it asks for, the
window closes after ``complete_idle`` (0.2 s) without a new pod instead. A Deployment scaled to
26 replicas is solved as soon as its 26th pod is seen. A pod with no such owner, or an owner
still short of pods, keeps the full ``idle`` wait, so the rule only ever shortens a window whose
burst is visibly complete; the short wait is for other Deployments applied in the same breath.
Who owns a pod and whether an owner is complete is the caller's to say (``Bursts``); the window
asks again, at each look (and, from the provisioner, at each ReplicaSet event), about an owner
it last found short, since the caches that tell may lag the pod events that feed the window.
Time comes from the injected clock. Pods are observed when a round looks (``observe``) and,
against a real API, as their events arrive (``saw``, from an informer's thread), so the window
counts from the pod itself and not from the next look.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Final, Protocol

from karpenter_capi.core.clock import Clock

DEFAULT_IDLE_SECONDS: Final = 1.0
DEFAULT_MAX_SECONDS: Final = 10.0
DEFAULT_COMPLETE_IDLE_SECONDS: Final = 0.2


class Bursts(Protocol):
    """What the window asks about the pods that open or extend it."""

    def owner_of(self, key: str) -> str | None:
        """The pod's owner whose replica count is known (a ReplicaSet), or ``None``."""

    def complete(self, owner: str) -> bool:
        """Whether ``owner`` has all the replicas it asks for."""


class Batcher:
    """Tracks when the current batch of pending pods began and last grew."""

    def __init__(
        self,
        clock: Clock,
        *,
        idle: float = DEFAULT_IDLE_SECONDS,
        max_duration: float = DEFAULT_MAX_SECONDS,
    ) -> None:
        if idle <= 0 or max_duration < idle:
            raise ValueError(
                f"batch window: need 0 < idle ({idle}) <= max duration ({max_duration})"
            )
        self._clock = clock
        self._idle = idle
        self._max = max_duration
        self._complete_idle: float | None = None
        self._bursts: Bursts | None = None
        self._seen: set[str] = set()
        self._opened: float | None = None
        self._last_new: float = 0.0
        # The window's owners -> whether each had all its replicas when last asked (a True is
        # asked again only when a new pod of it comes); ``_unowned``: a pod came that has no
        # such owner, so the full idle wait holds.
        self._owners: dict[str, bool] = {}
        self._unowned = False
        self._new = False
        self._lock = threading.Lock()

    def track(self, bursts: Bursts, complete_idle: float) -> None:
        """Close a window early once its bursts are complete (see the module's docstring)."""
        if not 0 <= complete_idle <= self._idle:
            raise ValueError(
                f"batch window: need 0 <= complete idle ({complete_idle}) <= idle ({self._idle})"
            )
        with self._lock:
            self._bursts, self._complete_idle = bursts, complete_idle

    def observe(self, pending: Iterable[str]) -> None:
        """The pods pending now (by key); any not seen before opens or extends the window."""
        current = set(pending)
        with self._lock:
            now = self._clock.now().timestamp()
            new = current - self._seen
            if new:
                if self._opened is None:
                    self._opened = now
                self._last_new = now
                self._new = True
                for key in sorted(new):
                    self._note_owner(key)
            self._seen = current

    def saw(self, key: str) -> float | None:
        """One pending pod, as its event arrives: a new one opens or extends the window.
        Returns the seconds until the window closes when it did, else ``None``."""
        with self._lock:
            if key in self._seen:
                return None
            self._seen.add(key)
            now = self._clock.now().timestamp()
            if self._opened is None:
                self._opened = now
            self._last_new = now
            self._new = True
            self._note_owner(key)
            return max(0.0, self._closes_at() - now)

    def _note_owner(self, key: str) -> None:
        if self._bursts is None:
            return
        owner = self._bursts.owner_of(key)
        if owner is None:
            self._unowned = True
        else:
            self._owners[owner] = self._bursts.complete(owner)

    def _bursts_complete(self) -> bool:
        if self._bursts is None or not self._owners or self._unowned:
            return False
        for owner, complete in self._owners.items():
            if not complete:
                if not self._bursts.complete(owner):
                    return False
                self._owners[owner] = True
        return True

    def _closes_at(self) -> float:
        assert self._opened is not None
        closes = min(self._last_new + self._idle, self._opened + self._max)
        if self._complete_idle is not None and self._bursts_complete():
            closes = min(closes, self._last_new + self._complete_idle)
        return closes

    def trigger(self, *, new_pods: bool = False) -> None:
        """Something other than a new pod calls for a round (the cluster changed under pods
        still pending): open or extend the window as a new pod would. ``new_pods``: the
        round is still the first for pods it holds (one that failed part-way is retried)."""
        with self._lock:
            now = self._clock.now().timestamp()
            if self._opened is None:
                self._opened = now
            self._last_new = now
            self._unowned = True  # no new pod says the burst is complete: wait the full idle
            self._new = self._new or new_pods

    @property
    def holds_new_pods(self) -> bool:
        """Whether the open window holds a pod no round has seen yet (not only a trigger):
        its round is a first decision. Read without the lock (one attribute)."""
        return self._new

    def ready(self) -> bool:
        """Whether the open window has closed, so a solve should run now."""
        with self._lock:
            if self._opened is None:
                return False
            return self._clock.now().timestamp() >= self._closes_at()

    def seconds_until_ready(self) -> float | None:
        """How long until the window closes with no new pods; ``None`` when none is open."""
        with self._lock:
            if self._opened is None:
                return None
            return max(0.0, self._closes_at() - self._clock.now().timestamp())

    def reset(self) -> None:
        """The batch was solved: the next new pod opens a new window."""
        with self._lock:
            self._opened = None
            self._owners = {}
            self._unowned = False
            self._new = False
