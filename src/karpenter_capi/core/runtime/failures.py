"""How the runtime logs a reconcile or a periodic run that raised.

An exception a controller lets escape is of two kinds. Most say something about the cluster,
not the code: a value no validation caught (a ``DurationError``, a ``QuantityError``, a model
that would not parse), an answer of the API (an object refused, a server away or busy), a
provider's own error. The user needs the message, once, not a traceback on every retry: one
WARNING line while the message is new, DEBUG while it repeats, and WARNING again once it
changes or after a success. Anything else is a bug in this program and keeps its traceback at
ERROR every time, so it is seen and reported.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable

from pydantic import ValidationError

from karpenter_capi.core.errors import ProviderError
from karpenter_capi.core.kube.errors import ApiError


def expected(error: BaseException) -> bool:
    """Whether ``error`` is about the input or the API rather than a bug here: the API's
    answers, a provider's deliberate errors, and this program's own ``ValueError`` types
    (a bare ``ValueError``, such as a failed unpacking, stays a bug)."""
    if isinstance(error, ApiError | ProviderError | ValidationError):
        return True
    return isinstance(error, ValueError) and type(error).__module__.startswith("karpenter_capi.")


class FailureLog:
    """Logs failures per (controller, key): expected ones once per message, bugs always."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._said: dict[Hashable, str] = {}
        self._lock = threading.Lock()

    def failed(self, where: Hashable, what: str, error: Exception) -> None:
        """``what`` (``"scripted: reconcile of default/app failed (retry 2)"``) failed."""
        if not expected(error):
            self._log.error("%s", what, exc_info=error)
            return
        message = f"{type(error).__name__}: {error}"
        with self._lock:
            repeated = self._said.get(where) == message
            self._said[where] = message
        self._log.log(logging.DEBUG if repeated else logging.WARNING, "%s: %s", what, message)

    def succeeded(self, where: Hashable) -> None:
        """A failure after this is news again."""
        if where in self._said:
            with self._lock:
                self._said.pop(where, None)
