"""An informer's view of its API server's outages: what to log, and whom to tell it is over.

Why a module of its own: ``informer.py`` keeps the cache exact; how its failures are reported
is a separate concern with its own rules. An API or connection error is the weather, not a bug:
it is logged as one line when it starts or changes (at DEBUG while it repeats, so a minute-long
outage is not a minute of warnings), and only anything else gets a traceback. When the server
answers again after failures, the recovery handlers run, so whoever waits on that cluster
(a launch, a reconcile held by the outage) resumes now instead of at the end of its backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from karpenter_capi.core.kube.errors import ApiError

# Under the informer's name: these are the informer's own lines.
_log = logging.getLogger("karpenter_capi.core.kube.informer")


class OutageLog:
    """The failures in a row of one informer (``name`` in the log) and its recovery handlers."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._logged = ""  # the failure last logged at WARNING
        self._unanswered = False  # failed since the server last answered
        self._handlers: list[Callable[[], None]] = []

    def add_handler(self, handler: Callable[[], None]) -> None:
        self._handlers.append(handler)

    def failed(self, error: Exception, summary: str, what: str, delay: float) -> None:
        """``what`` (listing, watching) failed with ``error`` (``summary``: its one line)."""
        self._unanswered = True
        expected = isinstance(error, ApiError | OSError) or getattr(error, "expected", False)
        repeated = expected and summary == self._logged
        self._logged = summary
        _log.log(
            logging.DEBUG if repeated else logging.WARNING,
            "%s: %s failed, retrying in %.1fs: %s",
            self.name,
            what,
            delay,
            summary,
            exc_info=not expected,
        )

    def answered(self) -> None:
        """The server answered a list or opened a watch: if it had not before, it is back."""
        if not self._unanswered:
            return
        self._unanswered = False
        self._logged = ""  # the next failure is news again
        _log.info("%s: the API server answers again", self.name)
        for handler in list(self._handlers):
            try:
                handler()
            except Exception:
                _log.exception("%s: a recovery handler failed", self.name)
