"""What a controller is, independently of what runs it.

A controller is a reconcile function over one primary resource: given the key of an object
(``namespace/name``, or ``name`` for cluster-scoped kinds, as ``core.kube.cache.object_key``),
it reads the world from the informer caches, makes one step of progress through the client,
and says when it wants to be called again. Events on the primary resource enqueue their own
key; events on the other resources it ``watches`` are mapped to primary keys.

The same controller runs under two drivers (``core.runtime``): threaded, with informer threads
and worker pools, for real clusters; and stepped, in one thread on a virtual clock, for tests
and the simulator. A controller must therefore never sleep, never read the wall clock and never
block on the network longer than one API call: waiting is ``Result(requeue_after=...)``.
Raising an exception means "retry with backoff" (the work queue's per-item rate limiter, 5 ms
doubling to 1000 s as client-go); a reconcile must be safe to repeat.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.cache import Store, object_key
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.events import EventRecorder
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.core.observability.metrics import Metrics
from karpenter_capi.core.plugin_host import Plugins
from karpenter_capi.core.scheduling.podspec import PodSpecs

__all__ = [
    "DONE",
    "MANAGEMENT",
    "WORKLOAD",
    "Caches",
    "Controller",
    "ControllerContext",
    "Key",
    "Metrics",
    "PeriodicController",
    "Result",
    "Watch",
    "own_key",
]

Key = str
"""``namespace/name`` or ``name``: the cache key of the primary object."""

WORKLOAD = "workload"
MANAGEMENT = "management"
"""The two clusters a controller may read (design decision 11, "Management and workload
clusters are configured apart"); they are often the same."""


@dataclass(frozen=True)
class Result:
    """What a reconcile asks of its driver: ``requeue_after`` seconds, or nothing."""

    requeue_after: float | None = None


DONE = Result()


def own_key(obj: JsonObject) -> Iterable[Key]:
    """The default mapping: an object's event enqueues the object itself."""
    return (object_key(obj),)


@dataclass(frozen=True)
class Watch:
    """A resource whose events wake the controller, and which primary keys they wake.

    ``cluster`` says which cluster's informer to use. ``to_keys`` receives the object of each
    add, update and delete event (the old and the new object for an update) and returns the
    primary keys to enqueue.
    """

    resource: Resource
    to_keys: Callable[[JsonObject], Iterable[Key]] = own_key
    cluster: str = WORKLOAD


class Caches(Protocol):
    """Read access to the informer caches the driver keeps in sync."""

    def store(self, resource: Resource, cluster: str = WORKLOAD) -> Store[JsonObject]:
        """The cache of ``resource`` (a driver starts an informer for every resource a
        controller watches, or names in ``Controller.reads``)."""
        ...

    def has_synced(self) -> bool:
        """Whether every informer has completed its initial list."""
        ...

    def resource_version(self, resource: Resource, cluster: str = WORKLOAD) -> str:
        """How far the cache of ``resource`` has followed the API: the resourceVersion of the
        last event or list it applied (a write answered at or before it shows in the cache)."""
        ...


@dataclass
class ControllerContext:
    """What every controller is built with.

    Reads come from ``caches``; writes go through ``client`` (workload cluster) or
    ``management`` (where the Cluster API objects live). With ``dry_run`` a controller logs the
    write it would make and makes none.
    """

    client: KubeClient
    management: KubeClient
    caches: Caches
    clock: Clock
    plugins: Plugins
    recorder: EventRecorder
    metrics: Metrics | None = None
    dry_run: bool = False
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("karpenter_capi"))
    pod_specs: PodSpecs = field(default_factory=PodSpecs)
    """Pods parsed for scheduling, shared by provisioning and disruption across rounds."""


class Controller(Protocol):
    """One reconcile loop; see the module docstring."""

    name: str
    """Unique, used in logs, metrics and the work queue's name."""

    primary: Resource
    """Its events enqueue their own keys; ``reconcile`` receives keys of this resource."""

    primary_cluster: str
    """``WORKLOAD`` or ``MANAGEMENT``: where the primary resource lives."""

    def watches(self) -> Sequence[Watch]:
        """Other resources whose events wake this controller (may be empty)."""
        ...

    def reads(self) -> Sequence[tuple[Resource, str]]:
        """Resources (and clusters) read from the caches without being watched."""
        ...

    def reconcile(self, key: Key) -> Result:
        """Make progress on the primary object ``key`` (which may no longer exist)."""
        ...


class PeriodicController(Protocol):
    """A loop with no primary object (garbage collection, provisioning rounds).

    The driver calls ``run_once`` at start and then every time the returned ``Result`` says
    (``requeue_after``; ``None`` means the controller's ``interval``).
    """

    name: str
    interval: float

    def reads(self) -> Sequence[tuple[Resource, str]]: ...

    def run_once(self) -> Result: ...
