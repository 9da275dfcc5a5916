"""Kubernetes Events: how the controller tells users, in ``kubectl describe``, what it did.

Events are written as ``core/v1`` Events (what ``kubectl describe`` and ``kubectl get events``
read). Like client-go's recorder, a repeat of the same event on the same object within a short
window bumps ``count`` and ``lastTimestamp`` on the existing Event instead of creating another,
so a pod that stays unschedulable for an hour does not produce thousands of objects. An event
said again on every pass (``Unconsolidatable``) can instead be *deduplicated*, as upstream
Karpenter's recorder does: a repeat of the same object, type, reason and message within the
window is dropped without any write. Failing to record is logged and never stops the caller:
events are for humans, not for correctness.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from karpenter_capi.core.clock import Clock, format_timestamp
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.kube.resources import EVENTS

log = logging.getLogger(__name__)

COMPONENT: Final = "karpenter"
NORMAL: Final = "Normal"
WARNING: Final = "Warning"
_REPEAT_WINDOW: Final = timedelta(minutes=10)
_DEFAULT_NAMESPACE: Final = "default"
UNCONSOLIDATABLE_DEDUPE: Final = timedelta(minutes=15)
"""Upstream's window for ``Unconsolidatable``: a kept node is told why at most this often."""
NOMINATION_QPS: Final = 5.0
NOMINATION_BURST: Final = 10
"""Upstream's ``PodNominationRateLimiter`` (``pkg/controllers/provisioning/scheduling/events.go``:
``flowcontrol.NewTokenBucketRateLimiter(5, 10)``), one bucket for every pod's ``Nominated``."""


@dataclass
class _Recorded:
    name: str
    namespace: str
    count: int
    last: float


class EventRecorder:
    """Records Events against objects, folding repeats into one Event with a count."""

    def __init__(self, client: KubeClient, clock: Clock, component: str = COMPONENT) -> None:
        self._client = client
        self._clock = clock
        self._component = component
        self._recent: dict[tuple[str, str, str, str], _Recorded] = {}
        # What an entry is remembered for: the repeat window, or the longest dedupe asked for.
        self._horizon = max(_REPEAT_WINDOW, UNCONSOLIDATABLE_DEDUPE).total_seconds()
        self._next_sweep: float | None = None

    def record(
        self,
        involved: Mapping[str, Any],
        event_type: str,
        reason: str,
        message: str,
        *,
        dedupe: timedelta | None = None,
        correlate: bool = False,
    ) -> None:
        """Record ``reason``/``message`` on ``involved`` (any object with kind and metadata).

        With ``dedupe``, the same event on the same object within that long of the last one
        written is dropped instead of counted: no API request at all. With ``correlate``, an
        event this recorder has not written yet is first looked for among the object's Events
        (another replica, or this process before a restart, may have written it): found, its
        count is bumped, as client-go's EventCorrelator bumps the Event it remembers. For
        events said once per change, where a second copy after a handover is noise.
        """
        meta = involved.get("metadata") or {}
        namespace = str(meta.get("namespace") or _DEFAULT_NAMESPACE)
        uid = str(meta.get("uid") or f"{namespace}/{meta.get('name')}")
        key = (uid, event_type, reason, message)
        now = self._clock.now()
        stamp = format_timestamp(now)
        if dedupe is not None:
            self._horizon = max(self._horizon, dedupe.total_seconds())
        self._sweep(now.timestamp())
        seen = self._recent.get(key)
        # Found in the API server: this repeat belongs on it however old it is.
        found = False
        if seen is None and correlate:
            seen = self._existing(involved, event_type, reason, message)
            if seen is not None:
                found, self._recent[key] = True, seen
        if (
            not found
            and dedupe is not None
            and seen is not None
            and now.timestamp() - seen.last < dedupe.total_seconds()
        ):
            return
        try:
            if seen is not None and (
                found or now.timestamp() - seen.last < _REPEAT_WINDOW.total_seconds()
            ):
                seen.count += 1
                seen.last = now.timestamp()
                self._client.patch(
                    EVENTS,
                    seen.name,
                    {"count": seen.count, "lastTimestamp": stamp},
                    seen.namespace,
                )
                return
            created = self._client.create(
                EVENTS,
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {
                        "generateName": f"{meta.get('name', 'object')}.",
                        "namespace": namespace,
                    },
                    "involvedObject": {
                        "apiVersion": involved.get("apiVersion", ""),
                        "kind": involved.get("kind", ""),
                        "name": meta.get("name", ""),
                        "namespace": meta.get("namespace") or "",
                        "uid": meta.get("uid", ""),
                        "resourceVersion": meta.get("resourceVersion", ""),
                    },
                    "type": event_type,
                    "reason": reason,
                    "message": message,
                    "source": {"component": self._component},
                    "reportingComponent": self._component,
                    "firstTimestamp": stamp,
                    "lastTimestamp": stamp,
                    "count": 1,
                },
                namespace,
            )
        except ApiError as exc:
            log.warning("could not record event %s on %s: %s", reason, meta.get("name"), exc)
            self._recent.pop(key, None)
            return
        self._recent[key] = _Recorded(
            str(created["metadata"]["name"]), namespace, 1, now.timestamp()
        )

    def _existing(
        self, involved: Mapping[str, Any], event_type: str, reason: str, message: str
    ) -> _Recorded | None:
        """The Event of this component already saying ``reason``/``message`` on ``involved``
        (the latest, if several), or None; one list by field selector, as kubectl's."""
        meta = involved.get("metadata") or {}
        namespace = str(meta.get("namespace") or _DEFAULT_NAMESPACE)
        fields = [f"reason={reason}", f"type={event_type}"]
        if meta.get("uid"):
            fields.append(f"involvedObject.uid={meta['uid']}")
        else:
            fields += [
                f"involvedObject.kind={involved.get('kind', '')}",
                f"involvedObject.name={meta.get('name', '')}",
            ]
        try:
            events = self._client.list(EVENTS, namespace, field_selector=",".join(fields)).items
        except ApiError as exc:
            log.warning("could not look for event %s on %s: %s", reason, meta.get("name"), exc)
            return None
        same = [
            e
            for e in events
            if e.get("message") == message
            and (e.get("source") or {}).get("component") == self._component
        ]
        if not same:
            return None
        latest = max(same, key=lambda e: str(e.get("lastTimestamp") or ""))
        name = str(latest["metadata"]["name"])
        return _Recorded(name, namespace, int(latest.get("count") or 1), 0.0)

    def _sweep(self, now: float) -> None:
        # Every object the controller ever told something about has an entry (pods, nodes,
        # NodeClaims long gone): forgetting those past the horizon once per horizon keeps the
        # map to what the last two horizons said, at a cost of O(1) per record amortized.
        if self._next_sweep is not None and now < self._next_sweep:
            return
        self._next_sweep = now + self._horizon
        self._recent = {k: v for k, v in self._recent.items() if now - v.last < self._horizon}
