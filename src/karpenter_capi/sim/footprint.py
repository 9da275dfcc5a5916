"""What a live object graph holds in memory, and in which of its structures.

A soak run (``sim.soak``) runs the controller in the same process as the simulated cluster
around it, so the process's RSS mixes the controller's memory with the simulator's: the
in-memory API server keeps every object and a window of watch history, the emulated kubelet
and scheduler keep their own caches. To tell a controller that leaks from a simulator that is
merely full, this module measures what is *reachable* from a set of roots (the ``Operator``,
or the API server), stopping at objects that belong to someone else: modules, classes, the
simulator's objects (anything defined under ``karpenter_capi.sim``, so the controller's
client, an ``AuditingClient``, ends its walk at the server), loggers. ``sys.getsizeof`` of each
object reached once gives the bytes; that is the memory freed if the roots went away, give or
take what is shared with the objects the walk stopped at.

The walk also names the containers it meets by where they hang (``Provisioner._nominated_at``:
a dict held in that attribute, every instance summed) with their item counts, so a growth
between two measurements points at the structure that grows, which RSS alone cannot. Module
globals of the controller's packages are roots too (``generic_capi``'s per-context state,
``functools`` caches, reported by their ``currsize``), since a cache there outlives any object.
"""

from __future__ import annotations

import functools
import gc
import logging
import sys
import threading
import types
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

CONTROLLER_PACKAGES: Final = ("karpenter_capi.core", "karpenter_capi.plugins")
SIMULATOR_PACKAGE: Final = "karpenter_capi.sim"

_CONTAINERS: Final = (dict, list, set, frozenset, deque, tuple)
# The type of a ``functools.lru_cache`` wrapper, which is not importable by name.
_CACHE_TYPE: Final = type(functools.lru_cache(maxsize=1)(lambda: None))
_SKIPPED_SLOTS: Final = frozenset({"__dict__", "__weakref__"})


@dataclass(frozen=True)
class Footprint:
    """``bytes`` and ``objects`` reachable from the roots; ``containers``: items held by the
    containers at each place (``Class.attribute`` or ``module.global``), over every instance,
    the containers nested in them included (a dict of lists counts its keys and the lists'
    items), so a place's count grows when anything kept there does."""

    bytes: int
    objects: int
    containers: dict[str, int] = field(default_factory=dict)

    def grown(self, later: Footprint, *, at_least: int = 1) -> list[tuple[str, int, int]]:
        """``(place, items here, items in later)`` for every place holding ``at_least`` more
        items in ``later``, largest growth first."""
        rows = [
            (place, self.containers.get(place, 0), count)
            for place, count in later.containers.items()
            if count - self.containers.get(place, 0) >= at_least
        ]
        return sorted(rows, key=lambda row: (row[1] - row[2], row[0]))


def _owned_by_simulator(obj: object) -> bool:
    return type(obj).__module__.startswith(SIMULATOR_PACKAGE)


def _module_dicts() -> set[int]:
    return {id(vars(module)) for module in list(sys.modules.values()) if module is not None}


def _slot_names(cls: type) -> Iterator[str]:
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in _SKIPPED_SLOTS:
                yield name


def _children(obj: object) -> Iterator[tuple[str | None, object]]:
    """``(attribute name or None, child)`` for what ``obj`` holds."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield None, key
            yield None, value
    elif isinstance(obj, list | tuple | set | frozenset | deque):
        for item in obj:
            yield None, item
    elif isinstance(obj, types.MethodType):
        yield None, obj.__self__
    elif isinstance(obj, types.FunctionType):
        # Globals and code are the module's; a closure's cells and defaults are the function's.
        for cell in obj.__closure__ or ():
            yield None, cell
        yield None, obj.__defaults__
        yield None, obj.__kwdefaults__
    elif isinstance(obj, _CACHE_TYPE):
        yield None, obj.__wrapped__
    else:
        yield from _attributes(obj)


def _attributes(obj: object) -> Iterator[tuple[str | None, object]]:
    """An instance's attributes (its ``__dict__`` and slots); what the collector says it
    refers to when it has neither (an extension type)."""
    instance_dict = getattr(obj, "__dict__", None)
    if isinstance(instance_dict, dict):
        yield from instance_dict.items()
    for name in _slot_names(type(obj)):
        try:
            yield name, object.__getattribute__(obj, name)
        except AttributeError:
            continue
    if instance_dict is None and not hasattr(type(obj), "__slots__"):
        for referent in gc.get_referents(obj):
            yield None, referent


_STOP_TYPES: Final = (
    types.ModuleType,
    type,
    types.CodeType,
    types.BuiltinFunctionType,
    logging.Logger,
    logging.Handler,
    type(threading.Lock()),
    type(threading.RLock()),
    threading.Thread,
)


def footprint(
    roots: Iterable[tuple[str, object]],
    *,
    stop: Callable[[object], bool] = _owned_by_simulator,
) -> Footprint:
    """What ``roots`` (``(place, object)`` pairs) hold, not walking into an object for which
    ``stop`` is true (default: the simulator's), nor into modules, classes and loggers."""
    module_dicts = _module_dicts()
    seen: set[int] = set()
    total = 0
    count = 0
    containers: dict[str, int] = {}
    pending: list[tuple[str, object]] = list(roots)
    while pending:
        place, obj = pending.pop()
        key = id(obj)
        if key in seen:
            continue
        seen.add(key)
        if isinstance(obj, _STOP_TYPES) or key in module_dicts or stop(obj):
            continue
        total += sys.getsizeof(obj)
        count += 1
        if isinstance(obj, _CONTAINERS) and not isinstance(obj, tuple):
            containers[place] = containers.get(place, 0) + len(obj)
        elif isinstance(obj, _CACHE_TYPE):
            containers[place] = containers.get(place, 0) + obj.cache_info().currsize
        owner = type(obj).__qualname__
        for name, child in _children(obj):
            pending.append((place if name is None else f"{owner}.{name}", child))
    return Footprint(total, count, containers)


def module_roots(packages: Iterable[str] = CONTROLLER_PACKAGES) -> list[tuple[str, object]]:
    """The containers and ``functools`` caches held in the globals of ``packages``' modules."""
    prefixes = tuple(packages)
    roots: list[tuple[str, object]] = []
    for name, module in sorted(sys.modules.items()):
        if module is None or not name.startswith(prefixes):
            continue
        for attribute, value in vars(module).items():
            if attribute.startswith("__"):
                continue
            mutable = isinstance(value, _CONTAINERS) and not isinstance(value, tuple | frozenset)
            cached = isinstance(value, _CACHE_TYPE) and value.__module__ == name
            if mutable or cached:
                roots.append((f"{name}.{attribute}", value))
    return roots


def process_memory() -> dict[str, Any]:
    """``rss_bytes``, how it was read (``/proc/self/status`` ``VmRSS``: the resident set now;
    else ``getrusage``'s ``ru_maxrss``: the peak), Python's allocated blocks and gc objects."""
    rss: int | None = None
    source = "/proc/self/status VmRSS"
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if rss is None:
        import resource

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        source = "getrusage ru_maxrss (peak)"
    return {
        "rss_bytes": rss,
        "rss_source": source,
        "python_blocks": sys.getallocatedblocks(),
        "gc_objects": len(gc.get_objects()),
    }
