"""What a write hook is: one piece of a control plane that reacts to writes, in process.

A real cluster spreads the consequences of a write over many components (admission plugins,
apiextensions-apiserver, the garbage collector, the namespace and disruption controllers),
each reacting to the objects it cares about. The in-memory server runs the ones the project
needs synchronously, inside the write that triggers them, as ``WriteHook`` objects in one
ordered list (``hook_order.WRITE_HOOKS``). A hook overrides only the phases it takes part in;
the engine calls each phase on the hooks that override it, in list order:

- ``refuse_create``: before anything else on create; raise to refuse the kind outright.
- ``admit``: the object as it will be stored (prune, default, validate); returns it.
- ``unknown_fields``: paths the server would drop, for ``fieldValidation``.
- ``prepare_create`` / ``prepare_update``: last checks and server-set fields before a commit.
- ``delete``: take over deleting an object of a kind whose deletion is its own (first wins).
- ``after_commit``: react to a committed ADDED, MODIFIED or DELETED (may write in turn).

Every phase runs with the engine's lock held.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from karpenter_capi.core.kube.client import WatchEventType
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.store import Table

if TYPE_CHECKING:
    from karpenter_capi.sim.apiserver.engine import Engine

JsonObject = dict[str, Any]

# What a delete answers: the object (as marked for deletion, or as last stored when it went at
# once) and whether it was removed by this very call (kube's ``wasDeleted``).
Deletion = tuple[JsonObject, bool]
# The stored object an update replaces (None on create), and where a client's warnings go
# (None: nobody listens).
Previous = JsonObject | None
Warnings = list[str] | None

PHASES = (
    "refuse_create",
    "admit",
    "unknown_fields",
    "prepare_create",
    "prepare_update",
    "delete",
    "after_commit",
)


class WriteHook:
    """A component reacting to writes; every phase does nothing unless overridden."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def refuse_create(self, definition: ResourceDefinition) -> None:
        """Raise if ``definition``'s objects may not be created right now."""

    def admit(
        self, definition: ResourceDefinition, obj: JsonObject, old: Previous, warnings: Warnings
    ) -> JsonObject:
        """The object as it will be stored; ``old`` is the stored one on update."""
        return obj

    def unknown_fields(self, definition: ResourceDefinition, obj: JsonObject) -> list[str]:
        """Paths of fields in ``obj`` this hook knows the server would drop."""
        return []

    def prepare_create(self, definition: ResourceDefinition, obj: JsonObject) -> None:
        """Validate or fill in ``obj`` (mutable) just before it is first stored."""

    def prepare_update(
        self, definition: ResourceDefinition, old: JsonObject, new: JsonObject
    ) -> None:
        """Validate or fill in ``new`` (mutable) just before it replaces ``old``."""

    def delete(self, table: Table, stored: JsonObject) -> Deletion | None:
        """Delete ``stored`` this hook's way, or None to leave it to the engine."""
        return None

    def after_commit(
        self, table: Table, event_type: WatchEventType, stored: JsonObject, prev: JsonObject | None
    ) -> None:
        """React to ``stored`` having been committed (``prev``: what it replaced)."""


HookFactory = Callable[["Engine"], WriteHook]


def overrides(hook: WriteHook, phase: str) -> bool:
    """Whether ``hook`` takes part in ``phase`` (the engine skips it otherwise)."""
    return getattr(type(hook), phase) is not getattr(WriteHook, phase)
