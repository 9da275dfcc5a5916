"""Fault injection: make the in-memory API server misbehave the way real ones do.

Controllers must survive throttling (429 with Retry-After), internal errors, timeouts, dropped
watch connections and compacted history. Tests stage those on purpose through
``server.faults`` instead of mocking the client, so the retry and relist paths run against the
same server the happy path uses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from karpenter_capi.core.kube.errors import ApiError, InternalError, Timeout, TooManyRequests

VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete", "evict", "*"})


@dataclass
class FaultRule:
    """Fail matching requests with ``error``, ``remaining`` more times (``None`` = always)."""

    verb: str
    resource: str  # plural ("pods"), group resource ("machines.cluster.x-k8s.io") or "*"
    error: ApiError
    name: str | None = None
    subresource: str | None = None
    remaining: int | None = 1
    hits: int = 0

    def matches(
        self, verb: str, plural: str, group_resource: str, name: str | None, subresource: str | None
    ) -> bool:
        if self.verb not in ("*", verb):
            return False
        if self.resource not in ("*", plural, group_resource):
            return False
        if self.name is not None and self.name != name:
            return False
        return self.subresource is None or self.subresource == subresource


def _fresh(error: ApiError) -> ApiError:
    """A new exception equal to ``error`` (raising one instance twice chains tracebacks)."""
    return type(error)(
        error.message,
        code=error.code,
        reason=error.reason,
        details=dict(error.details),
        retry_after_seconds=error.retry_after_seconds,
    )


class FaultInjector:
    """Rules consulted by every request of the server, plus watch-level faults."""

    def __init__(
        self,
        drop_watches: Callable[[], int],
        compact: Callable[[], None],
    ) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._drop_watches = drop_watches
        self._compact = compact

    def fail(
        self,
        verb: str,
        resource: str,
        error: ApiError,
        *,
        name: str | None = None,
        subresource: str | None = None,
        times: int | None = 1,
    ) -> FaultRule:
        """Fail ``verb`` on ``resource`` (optionally one ``name``) ``times`` times (None: ever)."""
        if verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}; expected one of {sorted(VERBS)}")
        rule = FaultRule(verb, resource, error, name, subresource, times)
        with self._lock:
            self._rules.append(rule)
        return rule

    def throttle(
        self,
        verb: str,
        resource: str,
        *,
        retry_after_seconds: int = 1,
        name: str | None = None,
        times: int | None = 1,
    ) -> FaultRule:
        """Answer 429 with ``Retry-After`` as kube's priority-and-fairness does."""
        error = TooManyRequests(
            "Too many requests, please try again later.",
            retry_after_seconds=retry_after_seconds,
        )
        return self.fail(verb, resource, error, name=name, times=times)

    def internal_error(
        self, verb: str, resource: str, *, name: str | None = None, times: int | None = 1
    ) -> FaultRule:
        error = InternalError("Internal error occurred: injected fault")
        return self.fail(verb, resource, error, name=name, times=times)

    def timeout(
        self, verb: str, resource: str, *, name: str | None = None, times: int | None = 1
    ) -> FaultRule:
        error = Timeout(
            "The request did not complete within the allotted timeout",
            details={"retryAfterSeconds": 1},
        )
        return self.fail(verb, resource, error, name=name, times=times)

    def remove(self, rule: FaultRule) -> None:
        with self._lock:
            if rule in self._rules:
                self._rules.remove(rule)

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    @property
    def rules(self) -> list[FaultRule]:
        with self._lock:
            return list(self._rules)

    def check(
        self,
        verb: str,
        plural: str,
        group_resource: str,
        name: str | None = None,
        subresource: str | None = None,
    ) -> None:
        """Raise the first matching rule's error (consuming one of its remaining uses)."""
        with self._lock:
            for rule in self._rules:
                if rule.matches(verb, plural, group_resource, name, subresource):
                    rule.hits += 1
                    if rule.remaining is not None:
                        rule.remaining -= 1
                        if rule.remaining <= 0:
                            self._rules.remove(rule)
                    raise _fresh(rule.error)

    def drop_watches(self) -> int:
        """Close every open watch stream (they end as if the connection dropped)."""
        return self._drop_watches()

    def compact(self) -> None:
        """Drop all retained watch history: watching from any older resourceVersion is 410."""
        self._compact()
