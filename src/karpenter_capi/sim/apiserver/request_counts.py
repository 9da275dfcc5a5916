"""How many requests the in-memory API server served, by verb.

The load a controller puts on the API server is one of the figures a simulated run reports
(``simulate`` prints it; kube-apiserver's ``apiserver_request_total`` is the real-world
equivalent). Every request, in process or through the HTTP front, passes the server's fault
check first, so that is where it is counted. The key is the verb, with the subresource after a
slash when there is one: ``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``,
``delete``, ``update/status``, ``patch/scale``, ``create/eviction``. Discovery and OpenAPI
documents are not API requests and are not counted.

A watch with a zero timeout is not a watch a real client holds open: it is how the stepped
simulation's informers drain what is already there, once per step, thousands of times a run
where a real informer keeps one watch per resource open for minutes. Those drains are counted
apart, as ``watch/poll`` (``WATCH_POLL``), so ``watch`` counts only the watches opened to stay
open (the threaded runtime's, kubectl's ``-w``) and the other verbs are not drowned out.

``by_resource`` keeps the same counts with the resource too (``patch nodeclaims/status``,
``create pods/eviction``, the API group left out), for a test or benchmark that asks which
writes a controller makes, not only how many.

The counter sits on the hot path of every simulation, so it is a dict increment under a lock
of its own (never the server's lock, which writers hold while copying objects).
"""

from __future__ import annotations

import threading

WATCH_POLL = "watch/poll"
"""The key of zero-timeout watches (the stepped informers' drains), apart from ``watch``."""


def _names(verb: str, subresource: str | None, poll: bool, resource: str) -> tuple[str, str]:
    """The count keys of one kind of request: ``verb[/subresource]`` (or ``WATCH_POLL``), and
    ``verb resource[/subresource]`` for ``by_resource``."""
    if verb == "evict":  # the Eviction API is a create on pods/eviction
        verb = "create"
    key = WATCH_POLL if poll else f"{verb}/{subresource}" if subresource else verb
    return key, f"{key.split('/', 1)[0]} {resource}{f'/{subresource}' if subresource else ''}"


class RequestCounts:
    """Thread-safe request counts by ``verb`` or ``verb/subresource``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._resources: dict[str, int] = {}
        # The two names each kind of request is counted under, made once per kind, not per
        # request (a dict may be read and filled from many threads: the worst is a name made
        # twice, both the same).
        self._names: dict[tuple[str, str | None, bool, str], tuple[str, str]] = {}

    def record(
        self,
        verb: str,
        subresource: str | None = None,
        *,
        poll: bool = False,
        resource: str = "",
    ) -> None:
        """Count one request; ``poll``: a zero-timeout watch, counted as ``WATCH_POLL``.
        ``resource`` (its plural) is counted in ``by_resource`` too."""
        names = self._names.get((verb, subresource, poll, resource))
        if names is None:
            names = self._names[(verb, subresource, poll, resource)] = _names(
                verb, subresource, poll, resource
            )
        key, what = names
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1
            if resource:
                self._resources[what] = self._resources.get(what, 0) + 1

    def by_resource(self) -> dict[str, int]:
        """The counts so far by ``verb resource[/subresource]`` (a copy); a zero-timeout watch
        is a ``watch`` here."""
        with self._lock:
            return dict(self._resources)

    def snapshot(self) -> dict[str, int]:
        """The counts so far, by key (a copy)."""
        with self._lock:
            return dict(self._counts)

    def since(self, earlier: dict[str, int]) -> dict[str, int]:
        """The requests served after ``earlier`` (a ``snapshot``), keys without any left out."""
        now = self.snapshot()
        delta = {key: count - earlier.get(key, 0) for key, count in now.items()}
        return {key: count for key, count in sorted(delta.items()) if count > 0}
