"""``benchmarks/fleet.py``: the controller's API requests over a phase's waves, counted by the
HTTP fronts that serve them, by verb, resource and subresource.

Why: every request the controller makes costs it CPU on its one interpreter (building it,
parsing the answer), and at 100 clusters that CPU is what every cluster's decision queues
behind. Counting them where they arrive (kube-apiserver's ``apiserver_request_total``) says how
many a wave takes per NodeClaim and per pod, and which ones.

Only the controller's requests are counted: its ``User-Agent`` is ``karpenter-capi/VERSION
(IDENTITY)`` (``run`` sets it), where the emulated Cluster API's client in an emulator sends
the bare ``karpenter-capi``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront, ServedRequest

CONTROLLER_AGENT = "karpenter-capi/"
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def request_key(method: str, path: str, query: str) -> str:
    """``patch nodeclaims/status``, ``list pods``: a request as kube-apiserver counts it."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    if not rest or parts[:1] not in (["api"], ["apis"]):
        return f"{method.lower()} {path}"
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    verb = _VERBS.get(method, "get")
    if verb == "get" and len(rest) == 1:
        watching = any(p in ("watch=1", "watch=true") for p in query.lower().split("&"))
        verb = "watch" if watching else "list"
    return f"{verb} {resource}"


class RequestTally:
    """The controller's requests one front served: counts by key, and by key and status for
    the ones that failed (``patch nodeclaims/status 409``). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def add(self, request: ServedRequest) -> None:
        if not request.agent.startswith(CONTROLLER_AGENT):
            return
        key = request_key(request.method, request.path, request.query)
        keys = [key] if request.status < 400 else [key, f"{key} {request.status}"]
        with self._lock:
            for k in keys:
                self._counts[k] = self._counts.get(k, 0) + 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


class TallyFront(HttpFront):
    """An ``HttpFront`` that counts the controller's requests (``tally``) and keeps none."""

    def __init__(self, server: InMemoryAPIServer, **kwargs: Any) -> None:
        super().__init__(server, record_requests=True, **kwargs)
        self.tally = RequestTally()

    def record(self, request: ServedRequest) -> None:
        self.tally.add(request)


def summed(snapshots: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for snapshot in snapshots:
        for key, count in snapshot.items():
            total[key] = total.get(key, 0) + count
    return total


def requests_figures(
    before: Mapping[str, int], after: Mapping[str, int], nodeclaims: int, pods: int
) -> dict[str, Any]:
    """The requests between two ``summed`` snapshots: by key, writes per NodeClaim and per
    pod (failed ones are counted under their key too, and apart with their status)."""
    delta = {k: after[k] - before.get(k, 0) for k in after if after[k] > before.get(k, 0)}
    counted = {k: v for k, v in delta.items() if k.count(" ") == 1}
    failed = {k: v for k, v in delta.items() if k.count(" ") == 2}
    reads = ("get", "list", "watch")
    writes = sum(v for k, v in counted.items() if k.split(" ", 1)[0] not in reads)
    return {
        "total": sum(counted.values()),
        "writes": writes,
        "writes_per_nodeclaim": round(writes / nodeclaims, 2) if nodeclaims else None,
        "by_request": dict(sorted(counted.items(), key=lambda kv: (-kv[1], kv[0]))),
        "failed": dict(sorted(failed.items())),
        "per_nodeclaim": {
            k: round(v / nodeclaims, 2) for k, v in sorted(counted.items()) if nodeclaims
        },
        "per_pod": {
            k: round(v / pods, 2)
            for k, v in sorted(counted.items())
            if pods and (k.endswith(" pods") or " pods/" in k)
        },
    }
