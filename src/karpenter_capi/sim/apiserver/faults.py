"""Fault injection: make the in-memory API server misbehave the way real ones do.

Controllers must survive throttling (429 with Retry-After), internal errors, timeouts, slow
answers, dropped watch connections and compacted history. Tests stage those on purpose through
``server.faults`` instead of mocking the client, so the retry and relist paths run against the
same server the happy path uses.

Two scopes. A rule made with ``over_http=True`` is checked by the HTTP front only, so a storm
can hit the controller (a client over HTTP) while the emulated cluster around it, which calls
the server in process, keeps working; other rules fail every caller. A rule may be limited to a
window of the server's clock (``start``, ``duration``), which in a simulation is virtual time,
so "429 on every verb for 30 s" costs no wall time; and, over HTTP, to one client by its
User-Agent (``agent``), which is how one replica is cut off while another is not.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar, Unpack

from karpenter_capi.core.clock import Clock, FakeClock, SystemClock
from karpenter_capi.core.kube.errors import ApiError, InternalError, Timeout, TooManyRequests

VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete", "evict", "*"})


@dataclass
class _Scope:
    """Which requests a fault applies to, and when (server-clock monotonic seconds)."""

    verb: str
    resource: str  # plural ("pods"), group resource ("machines.cluster.x-k8s.io") or "*"
    name: str | None = None
    subresource: str | None = None
    over_http: bool = False
    agent: str | None = None  # a substring of the client's User-Agent (HTTP only)
    start: float | None = None
    end: float | None = None

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

    def applies(self, now: float, over_http: bool, agent: str | None) -> bool:
        """In scope and in its window (the verb and resource are checked by ``matches``)."""
        if self.over_http != over_http:
            return False
        if self.agent is not None and (agent is None or self.agent not in agent):
            return False
        if self.start is not None and now < self.start:
            return False
        return self.end is None or now < self.end

    def expired(self, now: float) -> bool:
        return self.end is not None and now >= self.end


@dataclass(kw_only=True)
class _Limited(_Scope):
    """A rule used up after ``remaining`` more matching requests (``None`` = never)."""

    remaining: int | None = 1
    hits: int = 0


@dataclass(kw_only=True)
class FaultRule(_Limited):
    """Fail matching requests with ``error``, ``remaining`` more times (``None`` = always)."""

    error: ApiError


@dataclass(kw_only=True)
class SlowRule(_Scope):
    """Answer matching HTTP requests only after ``seconds`` (on the server's clock)."""

    seconds: float
    hits: int = 0


@dataclass(kw_only=True)
class LostAnswerRule(_Limited):
    """Do matching HTTP requests, then hang up instead of answering (``remaining`` times)."""


class FaultScope(TypedDict, total=False):
    """Which requests a failure applies to, and when: ``FaultInjector.fail``'s keywords."""

    name: str | None
    times: int | None
    duration: float | None
    start: float | None
    over_http: bool
    agent: str | None


_Rule = TypeVar("_Rule", bound=_Scope)
_Used = TypeVar("_Used", bound=_Limited)


def _live_matches(
    rules: list[_Rule],
    now: float,
    request: tuple[str, str, str, str | None, str | None],
    over_http: bool,
    agent: str | None,
) -> Iterator[_Rule]:
    """The rules that apply to ``request`` now, in order; expired ones are dropped on the way.

    ``request`` is (verb, plural, group resource, name, subresource). The caller holds the
    injector's lock and may stop at the first.
    """
    for rule in list(rules):
        if rule.expired(now):
            rules.remove(rule)
        elif rule.applies(now, over_http, agent) and rule.matches(*request):
            yield rule


def _use(rules: list[_Used], rule: _Used) -> None:
    """Count one use of ``rule``, dropping it from ``rules`` when it is used up."""
    rule.hits += 1
    if rule.remaining is not None:
        rule.remaining -= 1
        if rule.remaining <= 0:
            rules.remove(rule)


def _throttled(retry_after_seconds: int) -> ApiError:
    return TooManyRequests(
        "Too many requests, please try again later.", retry_after_seconds=retry_after_seconds
    )


def _internal() -> ApiError:
    return InternalError("Internal error occurred: injected fault")


@dataclass
class _Periodic:
    """A watch-level fault repeated every ``interval`` seconds until ``end``."""

    kind: str  # "watch_drop" or "compaction"
    interval: float
    next_at: float
    end: float | None


def _fresh(error: ApiError) -> ApiError:
    """A new exception equal to ``error`` (raising one instance twice chains tracebacks)."""
    return type(error)(
        error.message,
        code=error.code,
        reason=error.reason,
        details=dict(error.details),
        retry_after_seconds=error.retry_after_seconds,
    )


def default_wait(clock: Clock) -> Callable[[float], None]:
    """How a slow answer waits: virtual time moves on a ``FakeClock``, real time otherwise.

    On a ``FakeClock`` the request itself advances the clock, which is what a stepped client
    blocked on a slow call sees: the time has passed when the answer arrives.
    """
    if isinstance(clock, FakeClock):
        return clock.advance
    pause = threading.Event()  # never set: waiting on it is a sleep that needs no time module

    def wait(seconds: float) -> None:
        pause.wait(seconds)

    return wait


class FaultInjector:
    """Rules consulted by every request of the server, plus watch-level faults.

    ``injected`` counts what was done, by kind: ``TooManyRequests``, ``InternalError``, ... (one
    per failed request), ``slow`` (answers delayed), ``watch_drop`` (streams ended) and
    ``compaction``.
    """

    def __init__(
        self,
        drop_watches: Callable[[], int],
        compact: Callable[[], None],
        clock: Clock | None = None,
        wait: Callable[[float], None] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._slow: list[SlowRule] = []
        self._lost: list[LostAnswerRule] = []
        self._periodic: list[_Periodic] = []
        self._drop_watches = drop_watches
        self._compact = compact
        self._clock: Clock = clock or SystemClock()
        self._wait = wait or default_wait(self._clock)
        self.injected: Counter[str] = Counter()

    def _window(self, start: float | None, duration: float | None) -> tuple[float | None, float]:
        """``(start, end)`` on the server clock; ``start=None`` with a duration means now."""
        if duration is None:
            return start, float("inf")
        if duration <= 0:
            raise ValueError("a fault's duration must be positive")
        begin = self._clock.monotonic() if start is None else start
        return begin, begin + duration

    def _scope(
        self,
        verb: str,
        resource: str,
        *,
        name: str | None = None,
        subresource: str | None = None,
        over_http: bool,
        agent: str | None,
        start: float | None,
        duration: float | None,
    ) -> dict[str, Any]:
        """A new rule's ``_Scope`` fields, checked (the verb, ``agent`` only over HTTP)."""
        if verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}; expected one of {sorted(VERBS)}")
        if agent is not None and not over_http:
            raise ValueError("agent= needs over_http=True: only HTTP requests carry a User-Agent")
        begin, end = self._window(start, duration)
        scope = _Scope(
            verb,
            resource,
            name,
            subresource,
            over_http,
            agent,
            begin,
            None if end == float("inf") else end,
        )
        return vars(scope)

    def fail(
        self,
        verb: str,
        resource: str,
        error: ApiError,
        *,
        name: str | None = None,
        subresource: str | None = None,
        times: int | None = 1,
        duration: float | None = None,
        start: float | None = None,
        over_http: bool = False,
        agent: str | None = None,
    ) -> FaultRule:
        """Fail ``verb`` on ``resource`` (optionally one ``name``) ``times`` times (None: ever).

        ``duration`` (seconds of the server's clock from ``start``, default now) bounds when the
        rule applies; ``over_http`` limits it to requests through the HTTP front, ``agent`` to
        clients whose User-Agent contains it.
        """
        scope = self._scope(
            verb,
            resource,
            name=name,
            subresource=subresource,
            over_http=over_http,
            agent=agent,
            start=start,
            duration=duration,
        )
        rule = FaultRule(**scope, error=error, remaining=times)
        with self._lock:
            self._rules.append(rule)
        return rule

    def throttle(
        self,
        verb: str,
        resource: str,
        *,
        retry_after_seconds: int = 1,
        **scope: Unpack[FaultScope],
    ) -> FaultRule:
        """Answer 429 with ``Retry-After`` as kube's priority-and-fairness does."""
        return self.fail(verb, resource, _throttled(retry_after_seconds), **scope)

    def internal_error(self, verb: str, resource: str, **scope: Unpack[FaultScope]) -> FaultRule:
        """Answer 500 (an injected internal error)."""
        return self.fail(verb, resource, _internal(), **scope)

    def timeout(
        self, verb: str, resource: str, *, name: str | None = None, times: int | None = 1
    ) -> FaultRule:
        error = Timeout(
            "The request did not complete within the allotted timeout",
            details={"retryAfterSeconds": 1},
        )
        return self.fail(verb, resource, error, name=name, times=times)

    def storm(
        self,
        error: str,
        *,
        duration: float,
        start: float | None = None,
        verb: str = "*",
        resource: str = "*",
        retry_after_seconds: int = 1,
        agent: str | None = None,
    ) -> FaultRule:
        """Every matching HTTP request fails for ``duration``: ``error`` is ``"throttle"`` (429
        with ``Retry-After``) or ``"internal_error"`` (500)."""
        if error == "throttle":
            failure = _throttled(retry_after_seconds)
        elif error == "internal_error":
            failure = _internal()
        else:
            raise ValueError(f"unknown storm {error!r}; expected 'throttle' or 'internal_error'")
        return self.fail(
            verb,
            resource,
            failure,
            times=None,
            duration=duration,
            start=start,
            over_http=True,
            agent=agent,
        )

    def slow(
        self,
        seconds: float,
        *,
        verb: str = "*",
        resource: str = "*",
        duration: float | None = None,
        start: float | None = None,
        agent: str | None = None,
    ) -> SlowRule:
        """Delay every matching HTTP answer by ``seconds`` (a watch: its first byte)."""
        if verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}; expected one of {sorted(VERBS)}")
        if seconds <= 0:
            raise ValueError("a slow answer needs a positive delay")
        scope = self._scope(
            verb, resource, over_http=True, agent=agent, start=start, duration=duration
        )
        rule = SlowRule(**scope, seconds=seconds)
        with self._lock:
            self._slow.append(rule)
        return rule

    def lose_answers(
        self,
        *,
        verb: str = "*",
        resource: str = "*",
        times: int | None = 1,
        duration: float | None = None,
        start: float | None = None,
        agent: str | None = None,
    ) -> LostAnswerRule:
        """The HTTP front does matching requests and then drops the connection unanswered:
        a write that happened although its client saw only an error (a timeout, a reset)."""
        scope = self._scope(
            verb, resource, over_http=True, agent=agent, start=start, duration=duration
        )
        rule = LostAnswerRule(**scope, remaining=times)
        with self._lock:
            self._lost.append(rule)
        return rule

    def answer_lost(
        self,
        verb: str,
        plural: str,
        group_resource: str,
        name: str | None = None,
        subresource: str | None = None,
        *,
        agent: str | None = None,
    ) -> bool:
        """Whether the HTTP front should hang up after doing this request (uses up one)."""
        now = self._clock.monotonic()
        request = (verb, plural, group_resource, name, subresource)
        with self._lock:
            for rule in _live_matches(self._lost, now, request, True, agent):
                _use(self._lost, rule)
                self.injected["lost_answer"] += 1
                return True
        return False

    def drop_watches_every(
        self, interval: float, *, duration: float | None = None, start: float | None = None
    ) -> None:
        """End every open watch each ``interval`` seconds (see ``tick``)."""
        self._every("watch_drop", interval, duration, start)

    def compact_every(
        self, interval: float, *, duration: float | None = None, start: float | None = None
    ) -> None:
        """Compact the watch history each ``interval`` seconds: resumes then get 410 Gone."""
        self._every("compaction", interval, duration, start)

    def _every(
        self, kind: str, interval: float, duration: float | None, start: float | None
    ) -> None:
        if interval <= 0:
            raise ValueError("an interval must be positive")
        begin, end = self._window(start, duration)
        first = (self._clock.monotonic() if begin is None else begin) + interval
        with self._lock:
            self._periodic.append(
                _Periodic(kind, interval, first, None if end == float("inf") else end)
            )

    def tick(self) -> int:
        """Do the periodic faults that are due on the server clock; returns how many ran.

        The HTTP front calls this from its serve loop; a stepped simulation may call it as its
        virtual time moves, which makes the drops land at deterministic moments.
        """
        now = self._clock.monotonic()
        due: list[str] = []
        with self._lock:
            for periodic in list(self._periodic):
                while periodic.next_at <= now and (
                    periodic.end is None or periodic.next_at < periodic.end
                ):
                    due.append(periodic.kind)
                    periodic.next_at += periodic.interval
                if periodic.end is not None and periodic.next_at >= periodic.end:
                    self._periodic.remove(periodic)
        # Several missed periods collapse into one: dropping twice at once is dropping once.
        for kind in dict.fromkeys(due):
            if kind == "watch_drop":
                self.drop_watches()
            else:
                self.compact()
        return len(set(due))

    def remove(self, rule: FaultRule | SlowRule | LostAnswerRule) -> None:
        with self._lock:
            for rules in (self._rules, self._slow, self._lost):
                if rule in rules:
                    rules.remove(rule)  # type: ignore[arg-type]

    def clear(self) -> None:
        """Forget every rule and periodic fault (the counts in ``injected`` stay)."""
        with self._lock:
            self._rules.clear()
            self._slow.clear()
            self._lost.clear()
            self._periodic.clear()

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
        *,
        over_http: bool = False,
        agent: str | None = None,
    ) -> None:
        """Raise the first matching rule's error (consuming one of its remaining uses).

        ``over_http`` is True only for the HTTP front's own check, which sees the HTTP-only
        rules; the server's verbs check the others, whoever calls them.
        """
        if not self._rules:
            # Nothing to inject (every request of a run without faults): no clock, no lock. A
            # rule added meanwhile by another thread applies from the next request on, as if
            # it had been added just after this one.
            return
        now = self._clock.monotonic()
        request = (verb, plural, group_resource, name, subresource)
        with self._lock:
            for rule in _live_matches(self._rules, now, request, over_http, agent):
                _use(self._rules, rule)
                self.injected[rule.error.reason] += 1
                raise _fresh(rule.error)

    def delay(
        self,
        verb: str,
        plural: str,
        group_resource: str,
        name: str | None = None,
        subresource: str | None = None,
        *,
        agent: str | None = None,
    ) -> float:
        """Wait as long as the longest matching slow rule says; returns the seconds waited."""
        if not self._slow:
            return 0.0  # as in ``check``
        now = self._clock.monotonic()
        seconds = 0.0
        request = (verb, plural, group_resource, name, subresource)
        with self._lock:
            for rule in _live_matches(self._slow, now, request, True, agent):
                rule.hits += 1
                seconds = max(seconds, rule.seconds)
            if seconds:
                self.injected["slow"] += 1
        if seconds:
            self._wait(seconds)
        return seconds

    def drop_watches(self) -> int:
        """Close every open watch stream (they end as if the connection dropped)."""
        dropped = self._drop_watches()
        with self._lock:
            self.injected["watch_drop"] += dropped
        return dropped

    def compact(self) -> None:
        """Drop all retained watch history: watching from any older resourceVersion is 410."""
        self._compact()
        with self._lock:
            self.injected["compaction"] += 1
