"""Saying which DaemonSets a provisioning round could not read, on them and in the log.

A DaemonSet whose pod template cannot be read (a malformed quantity, a bad toleration) is left
out of the daemon overhead (``scheduling.daemons.parse_daemons``) rather than stopping the
round: every pending pod still gets capacity. The nodes launched meanwhile are sized without
it, so its owner must hear of it where ``kubectl describe`` shows it: a Warning Event on the
DaemonSet each round (the recorder folds repeats), and one WARNING log line per change of what
is wrong, not one per round.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Final

from karpenter_capi.core.kube.events import WARNING, EventRecorder
from karpenter_capi.core.scheduling.daemons import UnreadableDaemonSet

log = logging.getLogger(__name__)

REASON: Final = "InvalidDaemonSet"
_DEDUPE: Final = timedelta(minutes=15)
"""A round every few seconds repeats the Event; within this long a repeat is not even written."""


def _message(unreadable: UnreadableDaemonSet) -> str:
    problem = unreadable.problem.replace("cannot read its spec", "cannot read its pod template", 1)
    return (
        f"left out of the DaemonSet overhead of new nodes (they may be too small for it): {problem}"
    )


class UnreadableDaemonSets:
    """Reports each round's unreadable DaemonSets, logging each only when its problem changes."""

    def __init__(self, recorder: EventRecorder, *, dry_run: bool = False) -> None:
        self._recorder = recorder
        self._dry_run = dry_run
        self._said: dict[str, str] = {}  # namespace/name -> the message last logged

    def report(self, unreadable: Sequence[UnreadableDaemonSet]) -> None:
        said = {}
        for daemonset in unreadable:
            message = said[daemonset.name] = _message(daemonset)
            if self._said.get(daemonset.name) != message:
                log.warning("DaemonSet %s: %s", daemonset.name, message)
            if not self._dry_run:
                # Listed DaemonSets may lack kind and apiVersion; the Event must name them.
                involved = {**daemonset.daemonset, "apiVersion": "apps/v1", "kind": "DaemonSet"}
                self._recorder.record(involved, WARNING, REASON, message, dedupe=_DEDUPE)
        # A DaemonSet fixed (or deleted) and broken again is said again.
        self._said = said
