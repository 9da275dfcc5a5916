"""A thin recording wrapper around a ``KubeClient`` for the informer tests.

It counts list and watch calls (so a test can prove a LIST was not repeated) and can make the
next few calls fail, which is how the backoff tests stage an unhealthy API server without
sleeping or touching the network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from karpenter_capi.core.kube.client import KubeClient, ListResult, WatchStream
from karpenter_capi.core.kube.resources import Resource


@dataclass
class ListCall:
    resource: Resource
    limit: int | None
    continue_token: str | None
    label_selector: str | None


@dataclass
class WatchCall:
    resource: Resource
    resource_version: str | None
    allow_bookmarks: bool
    timeout_seconds: float | None


@dataclass
class RecordingClient:
    """Delegates to ``inner``; records list/watch calls; raises queued failures first."""

    inner: KubeClient
    lists: list[ListCall] = field(default_factory=list)
    watches: list[WatchCall] = field(default_factory=list)
    list_failures: list[Exception] = field(default_factory=list)
    watch_failures: list[Exception] = field(default_factory=list)
    before_list: Callable[[ListCall], None] | None = None
    before_watch: Callable[[WatchCall], None] | None = None

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> ListResult:
        call = ListCall(resource, limit, continue_token, label_selector)
        self.lists.append(call)
        if self.before_list is not None:
            self.before_list(call)
        if self.list_failures:
            raise self.list_failures.pop(0)
        return self.inner.list(
            resource,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_token=continue_token,
            resource_version=resource_version,
        )

    def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = False,
        timeout_seconds: float | None = None,
    ) -> WatchStream:
        call = WatchCall(resource, resource_version, allow_bookmarks, timeout_seconds)
        self.watches.append(call)
        if self.before_watch is not None:
            self.before_watch(call)
        if self.watch_failures:
            raise self.watch_failures.pop(0)
        return self.inner.watch(
            resource,
            namespace,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            allow_bookmarks=allow_bookmarks,
            timeout_seconds=timeout_seconds,
        )

    @property
    def first_page_lists(self) -> int:
        """How many lists started from the beginning (a relist or a restarted list)."""
        return sum(1 for call in self.lists if call.continue_token is None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
