"""The in-memory API server as a real one looks to the plugin's watch-fed mirrors, with a watch
that lags as it may on a loaded machine.

Against a real kube-apiserver a ``Mirror`` follows a watch on a thread of its own and waits only
for this process's own writes (``mirror`` docstring). ``LaggingApi`` is that: its watches cannot
be drained, they deliver at once every event up to this client's latest write (a watch delivers
in resourceVersion order), and others' later writes only when the test calls ``deliver``. A
test can so hold a Machine's copy at an older resourceVersion than the API's for as long as it
likes, as a busy control plane or a starved controller does for seconds.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Iterator
from typing import Any

from karpenter_capi.core.kube import JsonObject, ListResult, Resource, WatchEvent
from karpenter_capi.core.kube.resources import NAMESPACES
from karpenter_capi.core.kube.writelog import WriteLog
from karpenter_capi.sim.apiserver import InMemoryAPIServer


class LaggingApi:
    """A ``KubeClient`` over ``api`` whose watches lag others' writes (module docstring)."""

    drains_zero_timeout_watch = False

    def __init__(self, api: InMemoryAPIServer) -> None:
        self.api = api
        self.write_log = WriteLog()
        self._cond = threading.Condition()
        self._limit = self._server_rv()
        self._streams: list[_HeldStream] = []

    def _server_rv(self) -> int:
        return int(self.api.list(NAMESPACES).resource_version)  # the server's

    def deliver(self) -> None:
        """Let every watch deliver what the API server has now, and wait until it has."""
        with self._cond:
            self._limit = max(self._limit, self._server_rv())
            self._cond.notify_all()
        self._wait_idle()

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self._cond:
                streams = [s for s in self._streams if not s.closed]
                if all(s.idle_at >= self._limit for s in streams):
                    return
            time.sleep(0.001)
        raise AssertionError("the watches did not deliver in time")

    def _wrote(self, resource: Resource, answer: Any, *, whole: bool) -> Any:
        if isinstance(answer, dict):
            self.write_log.record(resource, answer, whole=whole)
            rv = str((answer.get("metadata") or {}).get("resourceVersion") or "")
            if rv.isdigit():
                with self._cond:
                    self._limit = max(self._limit, int(rv))
                    self._cond.notify_all()
        return answer

    # --- KubeClient -------------------------------------------------------------------------

    def get(self, resource: Resource, name: str, namespace: str | None = None, **kw: Any) -> Any:
        return self.api.get(resource, name, namespace, **kw)

    def list(self, resource: Resource, namespace: str | None = None, **kw: Any) -> ListResult:
        return self.api.list(resource, namespace, **kw)

    def watch(self, resource: Resource, namespace: str | None = None, **kw: Any) -> _HeldStream:
        stream = _HeldStream(self, resource, namespace, kw)
        with self._cond:
            self._streams.append(stream)
        return stream

    def create(self, resource: Resource, obj: JsonObject, namespace: str | None = None) -> Any:
        return self._wrote(resource, self.api.create(resource, obj, namespace), whole=True)

    def update(self, resource: Resource, obj: JsonObject, **kw: Any) -> Any:
        answer = self.api.update(resource, obj, **kw)
        return self._wrote(resource, answer, whole=kw.get("subresource") is None)

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: JsonObject,
        namespace: str | None = None,
        **kw: Any,
    ) -> Any:
        answer = self.api.patch(resource, name, patch, namespace, **kw)
        return self._wrote(resource, answer, whole=kw.get("subresource") is None)

    def delete(self, resource: Resource, name: str, namespace: str | None = None, **kw: Any) -> Any:
        return self._wrote(resource, self.api.delete(resource, name, namespace, **kw), whole=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)


class _HeldStream:
    """One watch: drains the in-memory server up to the owner's limit, then waits for more."""

    def __init__(
        self, owner: LaggingApi, resource: Resource, namespace: str | None, kw: dict[str, Any]
    ) -> None:
        self._owner = owner
        self._resource = resource
        self._namespace = namespace
        self._selector = kw.get("label_selector")
        self._rv = int(kw.get("resource_version") or 0)
        self.idle_at = 0
        self.closed = False

    def __iter__(self) -> Iterator[WatchEvent]:
        owner = self._owner
        while True:
            with owner._cond:
                self.idle_at = self._rv
                owner._cond.notify_all()
                owner._cond.wait_for(lambda: self.closed or owner._limit > self._rv)
                if self.closed:
                    return
                limit = owner._limit
            drained = owner.api.watch(
                self._resource,
                self._namespace,
                resource_version=str(self._rv),
                label_selector=self._selector,
                timeout_seconds=0,
            )
            events: builtins.list[WatchEvent] = []
            try:
                for event in drained:
                    if event.type == "ERROR" or int(event.resource_version) > limit:
                        break
                    events.append(event)
            finally:
                drained.close()
            yield from events
            self._rv = limit
            bookmark = {"kind": "Bookmark", "metadata": {"resourceVersion": str(limit)}}
            yield WatchEvent("BOOKMARK", bookmark)

    def close(self) -> None:
        with self._owner._cond:
            self.closed = True
            self._owner._cond.notify_all()
