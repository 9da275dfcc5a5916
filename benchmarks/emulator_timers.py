"""CPU time inside chosen functions of an emulator, for ``benchmarks/fleet.py --emulators K``.

Why: an emulator is a hundred threads (HTTP fronts, watch streams, informers, a worker pool),
most of them waiting; ``cProfile`` sees one thread and multiplies the cost of small calls, and
a stack sampler charges a thread's CPU to wherever it waits next. ``Timers`` wraps the
per-event paths instead (server writes, front requests by verb and resource, watch batches,
informer events, each emulated controller's reconcile, the collector) and adds each call's
``time.thread_time`` to its name: exact, inclusive (nested timed calls count in both).
``fleet_emulators.py`` installs them in each emulator when ``FLEET_PROFILE`` names a
directory and writes ``timers-PID.txt`` there when the emulator stops.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from typing import Any


class Timers:
    """The CPU (``time.thread_time``) spent inside chosen functions, inclusive, by name.

    ``wrap(owner, attribute, name)`` replaces a method or module function with a wrapper that
    adds its thread's CPU time across each call to ``name``'s total (nested timed calls count
    in both). Exact where the sampler smears: for the emulator's per-event paths."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def wrap(self, owner: object, attribute: str, name: str) -> None:
        original = getattr(owner, attribute)
        seconds, calls, clock = self.seconds, self.calls, time.thread_time

        def timed(*args: object, **kwargs: object) -> object:
            start = clock()
            try:
                return original(*args, **kwargs)
            finally:
                seconds[name] += clock() - start
                calls[name] += 1

        setattr(owner, attribute, timed)

    def lines(self) -> list[str]:
        return [
            f"{s:8.2f} s {self.calls[name]:8d} calls {s / max(1, self.calls[name]) * 1e6:8.0f} us"
            f"  {name}"
            for name, s in self.seconds.most_common()
        ]


_PLURALS = frozenset(
    [
        "pods",
        "nodes",
        "nodeclaims",
        "nodepools",
        "deployments",
        "replicasets",
        "events",
        "leases",
        "clusterapinodeclasses",
        "machines",
        "machinesets",
        "machinedeployments",
        "configmaps",
        "secrets",
        "namespaces",
    ]
)


def emulator_timers() -> Timers:
    """``Timers`` on the emulation's per-event paths (installed once, in an emulator)."""
    from karpenter_capi.core.kube import informer, official
    from karpenter_capi.core.kube._handlers import HandlerSet
    from karpenter_capi.core.runtime import manager, pool
    from karpenter_capi.sim.apiserver import http, server, watch
    from karpenter_capi.sim.capi import machine, machineset, nodes
    from karpenter_capi.sim.scheduler import controller
    from karpenter_capi.sim.workloads import deployments, kubelet, replicasets

    timers = Timers()
    began: list[float] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began.append(time.thread_time())
        elif began:
            name = f"gc: generation {info['generation']}"
            timers.seconds[name] += time.thread_time() - began.pop()
            timers.calls[name] += 1

    gc.callbacks.append(on_gc)
    for verb in ("create", "patch", "update", "delete", "get", "list", "watch"):
        timers.wrap(server.InMemoryAPIServer, verb, f"server.{verb}")
    timers.wrap(http._Handler, "_dispatch", "front: request")
    dispatch = http._Handler._dispatch

    def by_path(handler: Any, method: str) -> None:
        parts = handler.path.partition("?")[0].split("/")
        plural = next((p for p in reversed(parts) if p in _PLURALS), "?")
        tail = parts[-1] if parts[-1] in ("status", "scale") else ""
        name = f"front: {method} {plural} {tail} {'watch' if 'watch=' in handler.path else ''}"
        start = time.thread_time()
        try:
            dispatch(handler, method)
        finally:
            timers.seconds[name] += time.thread_time() - start
            timers.calls[name] += 1

    http._Handler._dispatch = by_path
    timers.wrap(http._Handler, "parse_request", "front: parse_request")
    timers.wrap(http, "_dumps", "front: encode")
    timers.wrap(watch.InMemoryWatch, "_next_batch", "watch: next batch")
    timers.wrap(watch.WatchHub, "notify", "watch: notify")
    timers.wrap(informer.Informer, "_apply", "informer: apply")
    timers.wrap(HandlerSet, "notify", "informer: handlers")
    timers.wrap(official.OfficialClient, "_call", "management client")
    timers.wrap(manager.Manager, "_process", "reconcile")
    timers.wrap(pool.WorkerPool, "_next_locked", "pool: next")
    timers.wrap(pool.WorkerPool, "_mark_pending", "pool: mark pending")
    for module, cls in (
        (controller, "SimScheduler"),
        (deployments, "DeploymentController"),
        (replicasets, "ReplicaSetController"),
        (kubelet, "PodKubelet"),
        (machine, "MachineController"),
        (machineset, "MachineSetController"),
        (nodes, "MachineNodeCreator"),
        (nodes, "NodeReadiness"),
    ):
        timers.wrap(getattr(module, cls), "reconcile", f"reconcile: {cls}")
    timers.wrap(controller.SimScheduler, "_set_scheduled", "scheduler: set scheduled")
    timers.wrap(controller.SimScheduler, "_on_pod", "scheduler: on pod")
    return timers
