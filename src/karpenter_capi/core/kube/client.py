"""The one port through which the controller talks to a Kubernetes API.

Two implementations stand behind it: the in-memory API of ``karpenter_capi.sim`` (in process,
for tests and simulation) and the adapter over the official ``kubernetes`` client
(``core.kube.official``), which also reaches the in-memory API through its HTTP front. One
contract test suite runs against both, so controller code written against this protocol behaves
the same on either.

Objects cross this port as plain JSON dicts, exactly as the API server sends them. Typed views
are made at the edge by validating into narrow pydantic models (see ``core.api``), never by the
transport.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol, runtime_checkable

from karpenter_capi.core.kube.resources import Resource

JsonObject = dict[str, Any]

WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]


class PatchType(StrEnum):
    """The patch formats, named by the content type the API server expects."""

    MERGE = "application/merge-patch+json"  # RFC 7386
    JSON = "application/json-patch+json"  # RFC 6902
    STRATEGIC = "application/strategic-merge-patch+json"  # built-in kinds only


class PropagationPolicy(StrEnum):
    BACKGROUND = "Background"
    FOREGROUND = "Foreground"
    ORPHAN = "Orphan"


@dataclass(frozen=True, slots=True)
class Preconditions:
    """Delete only if the live object still has this uid and/or resourceVersion (else 409)."""

    uid: str | None = None
    resource_version: str | None = None


@dataclass(frozen=True, slots=True)
class ListResult:
    items: list[JsonObject]
    resource_version: str
    continue_token: str | None = None
    remaining_item_count: int | None = None


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One watch event. For ``ERROR`` the object is a ``metav1.Status`` (code 410 = relist)."""

    type: WatchEventType
    object: JsonObject = field(repr=False)

    @property
    def resource_version(self) -> str:
        return str(self.object.get("metadata", {}).get("resourceVersion", ""))


@runtime_checkable
class WatchStream(Protocol):
    """An open watch. Iteration ends when the server closes it (timeout, shutdown) or on close()."""

    def __iter__(self) -> Iterator[WatchEvent]: ...

    def close(self) -> None: ...


@runtime_checkable
class KubeClient(Protocol):
    """Generic access to any resource, with the semantics of the Kubernetes REST API.

    Errors are raised as ``core.kube.errors.ApiError`` subclasses (``NotFound``, ``Conflict``,
    ``Gone``, ``Invalid``, ``TooManyRequests``, ...), whichever transport is used.

    ``namespace`` is ignored for cluster-scoped resources; for namespaced ones ``None`` on
    ``list``/``watch`` means all namespaces, and on other verbs is taken from the object's
    metadata (create/update) or is an error.
    """

    def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> JsonObject:
        """Read one object, or a subresource of it (``status``, ``scale``)."""
        ...

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
        """List objects. With ``limit``, ``continue_token`` pages through a consistent snapshot."""
        ...

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
        """Watch changes after ``resource_version``.

        Without a resourceVersion (or with ``""``) the stream starts with a synthetic ADDED
        for every current object, as the API server does. A resourceVersion older than the
        retained history yields a single ``ERROR`` event with a 410 ``Status`` (or raises
        ``Gone``), after which the caller must relist.
        """
        ...

    @property
    def drains_zero_timeout_watch(self) -> bool:
        """Whether ``watch(..., timeout_seconds=0)`` drains instead of streaming.

        ``True`` promises that such a watch delivers the events already recorded after
        ``resource_version`` and then ends at once, without waiting for more; with
        ``allow_bookmarks`` its last event is a ``BOOKMARK`` at the server's current
        resourceVersion. One call then brings a caller exactly up to date, which a list would
        otherwise be needed for. ``False`` promises nothing for a zero timeout: a real
        kube-apiserver reads ``timeoutSeconds=0`` as "its default" (minutes), so the watch blocks
        and streams like any other. Wrappers answer with the wrapped client's value.
        """
        ...

    def create(
        self,
        resource: Resource,
        obj: JsonObject,
        namespace: str | None = None,
    ) -> JsonObject:
        """Create an object (``metadata.generateName`` honoured). Returns the stored object."""
        ...

    def update(
        self,
        resource: Resource,
        obj: JsonObject,
        *,
        subresource: str | None = None,
    ) -> JsonObject:
        """Replace an object (PUT). ``metadata.resourceVersion``, if set, is a precondition."""
        ...

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: JsonObject | builtins.list[JsonObject],
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
    ) -> JsonObject:
        """Patch an object.

        A ``metadata.resourceVersion`` inside a merge patch is a precondition.
        """
        ...

    def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        preconditions: Preconditions | None = None,
        propagation_policy: PropagationPolicy | None = None,
        grace_period_seconds: int | None = None,
    ) -> JsonObject:
        """Delete an object.

        With finalizers it stays, with ``deletionTimestamp`` set, and is returned.
        """
        ...

    def evict(self, name: str, namespace: str, *, grace_period_seconds: int | None = None) -> None:
        """Evict a pod through the Eviction API; ``TooManyRequests`` when a PDB forbids it."""
        ...

    def served_versions(self, group: str) -> builtins.list[str]:
        """The versions the server serves for an API group, preferred first; ``[]`` if none."""
        ...

    def server_version(self) -> JsonObject:
        """The server's ``/version`` document (``gitVersion``, ``major``, ``minor``, ...)."""
        ...
