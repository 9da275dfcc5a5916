"""What the fleet tells users about each Cluster: an Event on it and a log line, once per change.

A sync runs every few seconds and sees the same broken Secret or unreachable server each time;
telling it each time would flood the Cluster's Events and the log. ``Reports`` remembers the
last ``(reason, news)`` said about each Cluster and says a new one only when it differs: the
news is the message without what changes by itself (a retry delay, an outage's latest error).
Warnings go to the log at WARNING without a traceback; ``NORMAL_REASONS`` at INFO. The memory is
the replica's own: the one that takes a Cluster over says the news again, and the recorder
finds the Event the last holder wrote and bumps its count (``EventRecorder`` ``correlate``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from karpenter_capi.core.fleet.discovery import ObservedCluster
from karpenter_capi.core.kube.events import EventRecorder

log = logging.getLogger(__name__)


class Reports:
    """Events on Clusters (in the management cluster) and log lines, deduplicated."""

    def __init__(self, recorder: EventRecorder, normal_reasons: Collection[str]) -> None:
        self._recorder = recorder
        self._normal = frozenset(normal_reasons)
        self._said: dict[str, tuple[str, str]] = {}

    def report(
        self, cluster: ObservedCluster, reason: str, message: str, *, news: str | None = None
    ) -> bool:
        """Tell ``reason``/``message`` about ``cluster`` unless it was the last thing said;
        ``news``: the part of ``message`` whose change is worth telling (default all of it).
        Returns whether it was told."""
        said = (reason, message if news is None else news)
        if self._said.get(cluster.key) == said:
            return False
        self._said[cluster.key] = said
        warning = reason not in self._normal
        if warning:
            log.warning("Cluster %s: %s: %s", cluster.key, reason, message)
        else:
            log.info("Cluster %s: %s", cluster.key, message)
        # Correlated: a replica taking the Cluster over says again what the last holder said;
        # that bumps the count of the Event already there instead of writing a second one.
        self._recorder.record(
            cluster.obj, "Warning" if warning else "Normal", reason, message, correlate=True
        )
        return True

    def say(self, where: str, reason: str, message: str) -> None:
        """A warning about the fleet itself (not one Cluster), in the log only, once."""
        if self._said.get(where) != (reason, message):
            self._said[where] = (reason, message)
            log.warning("%s: %s", reason, message)

    def last_reason(self, key: str) -> str | None:
        said = self._said.get(key)
        return said[0] if said is not None else None

    def last(self, key: str) -> tuple[str, str] | None:
        return self._said.get(key)

    def forget(self, key: str) -> None:
        """The next report about ``key`` is news (it was rebuilt, resumed, taken back)."""
        self._said.pop(key, None)

    def keep_only(self, keys: Collection[str], *, also: Collection[str] = ()) -> None:
        """Forget the Clusters not in ``keys`` (one made again under the name is news)."""
        for key in [k for k in self._said if k not in keys and k not in also]:
            del self._said[key]


__all__ = ["Reports"]
