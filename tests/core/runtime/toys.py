"""Toy controllers for the runtime tests: small, but written exactly as real ones are.

``Mirror`` is the reference controller: it copies a ConfigMap's data, and the names of the
pods that point at the ConfigMap through an annotation, into an annotation on the ConfigMap.
So it has a primary resource, a watched resource with a key mapping, reads only from the
caches and writes through the client, and its own write wakes it once more (the second
reconcile finds nothing to do): the shape of every real controller.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.cache import make_key, split_key
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.resources import CONFIGMAPS, PODS, Resource
from karpenter_capi.core.runtime.controller import (
    DONE,
    WORKLOAD,
    Caches,
    Key,
    Result,
    Watch,
)

CONFIG_ANNOTATION = "example.com/config"
"""On a pod: the name of the ConfigMap (same namespace) it uses."""

MIRROR_ANNOTATION = "example.com/mirror"
"""On a ConfigMap: the JSON the Mirror controller maintains."""


def configmap(name: str, data: dict[str, str], namespace: str = "default") -> JsonObject:
    return {"metadata": {"name": name, "namespace": namespace}, "data": data}


def pod(name: str, config: str | None, namespace: str = "default") -> JsonObject:
    annotations = {CONFIG_ANNOTATION: config} if config else {}
    return {
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    }


def mirrored(api: KubeClient, name: str, namespace: str = "default") -> dict[str, Any] | None:
    """The ConfigMap's mirror annotation, decoded (``None`` before the first reconcile)."""
    obj = api.get(CONFIGMAPS, name, namespace)
    text = (obj["metadata"].get("annotations") or {}).get(MIRROR_ANNOTATION)
    return None if text is None else dict(json.loads(text))


def pod_to_configmap(obj: JsonObject) -> Iterable[Key]:
    """A pod's event wakes the ConfigMap it names."""
    metadata = obj.get("metadata") or {}
    name = (metadata.get("annotations") or {}).get(CONFIG_ANNOTATION)
    return [make_key(name, metadata.get("namespace"))] if name else []


class Mirror:
    name = "mirror"
    primary = CONFIGMAPS
    primary_cluster = WORKLOAD

    def __init__(self, client: KubeClient, caches: Caches) -> None:
        self.client = client
        self.caches = caches
        self.reconciled: list[Key] = []

    def watches(self) -> Sequence[Watch]:
        return [Watch(PODS, to_keys=pod_to_configmap)]

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return []

    def reconcile(self, key: Key) -> Result:
        self.reconciled.append(key)
        current = self.caches.store(CONFIGMAPS).get(key)
        if current is None:
            return DONE  # deleted: nothing to clean up
        namespace, name = split_key(key)
        pods = sorted(
            p["metadata"]["name"]
            for p in self.caches.store(PODS).list()
            if p["metadata"].get("namespace") == namespace and pod_to_configmap(p) == [key]
        )
        desired = json.dumps({"data": current.get("data") or {}, "pods": pods}, sort_keys=True)
        annotations = current["metadata"].get("annotations") or {}
        if annotations.get(MIRROR_ANNOTATION) != desired:
            patch = {"metadata": {"annotations": {MIRROR_ANNOTATION: desired}}}
            self.client.patch(CONFIGMAPS, name, patch, namespace)
        return DONE


@dataclass
class Scripted:
    """A controller of ConfigMaps whose reconcile does what the test says, and logs when.

    ``behaviour(key, call_number)`` returns a ``Result`` or raises; every call is recorded with
    the clock's monotonic time.
    """

    clock: Clock
    behaviour: Callable[[Key, int], Result] = lambda key, n: DONE
    name: str = "scripted"
    primary: Resource = CONFIGMAPS
    primary_cluster: str = WORKLOAD
    read: Sequence[tuple[Resource, str]] = ()
    calls: list[tuple[Key, float]] = field(default_factory=list)

    def watches(self) -> Sequence[Watch]:
        return []

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return self.read

    def reconcile(self, key: Key) -> Result:
        self.calls.append((key, self.clock.monotonic()))
        return self.behaviour(key, len(self.calls))

    def times(self) -> list[float]:
        return [at for _, at in self.calls]


@dataclass
class Ticker:
    """A periodic controller that records the clock time of each run."""

    clock: Clock
    interval: float = 30.0
    behaviour: Callable[[int], Result] = lambda n: DONE
    name: str = "ticker"
    read: Sequence[tuple[Resource, str]] = ()
    runs: list[float] = field(default_factory=list)

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return self.read

    def run_once(self) -> Result:
        self.runs.append(self.clock.monotonic())
        return self.behaviour(len(self.runs))


class Woken(Ticker):
    """A ticker that asks to run at once when a ConfigMap named ``wake-*`` appears."""

    def wake_on(self) -> list[tuple[object, str, object]]:
        def when(obj: dict[str, object]) -> float | None:
            name = str((obj.get("metadata") or {}).get("name", ""))  # type: ignore[union-attr]
            return self.clock.monotonic() if name.startswith("wake-") else None

        return [(CONFIGMAPS, WORKLOAD, when)]


class WokenWhileRunning(Woken):
    """A ``Woken`` whose second run blocks until ``release`` is set, after telling ``entered``;
    ``asked`` is released once for each ``wake-*`` event its ``wake_on`` judged."""

    def __init__(self, clock: Clock, **kw: Any) -> None:
        super().__init__(clock, **kw)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.asked = threading.Semaphore(0)

    def run_once(self) -> Result:
        result = super().run_once()
        if len(self.runs) == 2:
            self.entered.set()
            self.release.wait(30)
        return result

    def wake_on(self) -> list[tuple[object, str, object]]:
        [(resource, cluster, when)] = super().wake_on()

        def counted(obj: dict[str, object]) -> float | None:
            at = when(obj)  # type: ignore[operator]
            if at is not None:
                self.asked.release()
            return at  # type: ignore[no-any-return]

        return [(resource, cluster, counted)]


class Failing(Exception):
    """What scripted controllers raise."""


class Recorder:
    """A ``ReconcileObserver`` that records, and lets a thread wait for a condition to hold.

    Every reconcile notifies waiters, so ``wait_until`` re-checks its predicate exactly when
    something may have changed: no sleeping, no polling.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.reconciles: list[tuple[str, float, BaseException | None]] = []
        self.depths: list[tuple[str, int]] = []

    def on_reconcile(self, controller: str, seconds: float, error: BaseException | None) -> None:
        with self._cond:
            self.reconciles.append((controller, seconds, error))
            self._cond.notify_all()

    def on_queue_depth(self, controller: str, depth: int) -> None:
        with self._cond:
            self.depths.append((controller, depth))
            self._cond.notify_all()

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    def count(self, controller: str) -> int:
        with self._cond:
            return sum(1 for name, _, _ in self.reconciles if name == controller)
