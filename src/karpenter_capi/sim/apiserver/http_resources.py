"""The resource half of the HTTP front: one request on one collection, object or subresource.

``http.py`` owns the socket, the URL grammar and discovery; this module maps a resolved request
(resource, namespace, name, subresource, query, body) onto the in-memory server's verbs and
shapes the answer (``List``, object, ``Table``, ``Status``, a streamed watch) the way
kube-apiserver does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from karpenter_capi.core.kube.client import (
    JsonObject,
    PatchType,
    Preconditions,
    PropagationPolicy,
    WatchEvent,
    WatchStream,
)
from karpenter_capi.core.kube.errors import (
    BadRequest,
    MethodNotAllowed,
    NotFound,
    UnsupportedMediaType,
)
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.sim.apiserver.http_tables import Table, TableRenderer, wants_table
from karpenter_capi.sim.apiserver.subresources import BINDINGS

if TYPE_CHECKING:
    from karpenter_capi.sim.apiserver import InMemoryAPIServer
    from karpenter_capi.sim.apiserver.definitions import ResourceDefinition

_PATCH_TYPES = {str(t): t for t in PatchType}
_APPLY_PATCH = "application/apply-patch+yaml"
JSON_TYPE = "application/json"
DRY_RUN_REFUSED = "dryRun is not supported by the simulated API server"


@dataclass(slots=True)
class Reply:
    code: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = JSON_TYPE
    # Sent as one ``Warning: 299 - "..."`` header each (kubectl prints them as ``Warning: ...``).
    warnings: list[str] = field(default_factory=list)


def refuse_dry_run(query: dict[str, str], options: Any = None) -> None:
    """400 for a dry run, asked in the query or in a DeleteOptions body (``dryRun: [All]``).

    The store cannot undo a write, so a dry run is refused rather than silently performed.
    """
    in_body = isinstance(options, dict) and bool(options.get("dryRun"))
    if query.get("dryRun") or in_body:
        raise BadRequest(DRY_RUN_REFUSED)


class _DeleteOptions(NamedTuple):
    body: JsonObject
    preconditions: Preconditions | None
    policy: PropagationPolicy | None
    grace_period_seconds: int | None


class RequestContext(Protocol):
    """What a resource request needs from the HTTP request it came in."""

    method: str
    query: dict[str, str]
    accept: str
    content_type: str
    api: InMemoryAPIServer
    tables: TableRenderer

    def truthy(self, key: str) -> bool: ...

    def json_body(self) -> Any: ...

    def stream_watch(
        self, stream: WatchStream, encode: Callable[[WatchEvent], JsonObject]
    ) -> None: ...


class ResourceRequest:
    """A request on one resource: collection, item or subresource, in one namespace or all."""

    def __init__(
        self,
        router: RequestContext,
        definition: ResourceDefinition,
        *,
        resource: Resource,
        namespace: str | None,
        name: str | None,
        subresource: str | None,
    ) -> None:
        self.router = router
        self.api = router.api
        self.definition = definition
        self.resource = resource
        self.namespace = namespace
        self.name = name
        self.subresource = subresource
        self.query = router.query

    def handle(self) -> Reply | None:
        method = self.router.method
        if self.definition is BINDINGS:
            return self._create_binding(method)
        if self.name is None:
            return self._handle_collection(method)
        return self._handle_object(method, self.name)

    def _handle_collection(self, method: str) -> Reply | None:
        """A request to the resource's collection: list or watch, create, delete them all."""
        if method == "GET":
            if self.router.truthy("watch"):
                self._watch()
                return None
            return self._list()
        if method == "POST":
            return self._create()
        if method == "DELETE":
            return self._delete_collection()
        raise MethodNotAllowed(f"{method} is not supported on this path")

    def _handle_object(self, method: str, name: str) -> Reply:
        """A request to one named object or its subresource."""
        if self.subresource == "eviction":
            if method == "POST":
                return self._evict()
        elif self.subresource == "binding":
            if method == "POST":
                return self._bind(name)
        elif method == "GET":
            obj = self.api.get(
                self.resource, name, self.namespace, subresource=self.subresource, shared=True
            )
            return self._object_reply(200, obj)
        elif method == "PUT":
            return self._update()
        elif method == "PATCH":
            return self._patch()
        elif method == "DELETE" and self.subresource is None:
            return self._delete()
        raise MethodNotAllowed(f"{method} is not supported on this path")

    # ---------------------------------------------------------------- reads

    def _list_kwargs(self) -> dict[str, Any]:
        return {
            "label_selector": self.query.get("labelSelector") or None,
            "field_selector": self.query.get("fieldSelector") or None,
        }

    def _list(self) -> Reply:
        limit_text = self.query.get("limit")
        limit = _int_param("limit", limit_text) if limit_text else None
        result = self.api.list(
            self.resource,
            self.namespace,
            limit=limit if limit and limit > 0 else None,
            continue_token=self.query.get("continue") or None,
            resource_version=self.query.get("resourceVersion") or None,
            **self._list_kwargs(),
        )
        metadata: JsonObject = {"resourceVersion": result.resource_version}
        if result.continue_token:
            metadata["continue"] = result.continue_token
        if result.remaining_item_count is not None:
            metadata["remainingItemCount"] = result.remaining_item_count
        if wants_table(self.router.accept):
            table = self.router.tables.render(self.definition, result.items, self._include_object())
            table["metadata"] = metadata
            return Reply(200, table)
        return Reply(
            200,
            {
                "kind": self.definition.list_kind,
                "apiVersion": self.resource.api_version,
                "metadata": metadata,
                "items": result.items,
            },
        )

    def _include_object(self) -> str:
        return self.query.get("includeObject") or "Metadata"

    def _watch(self) -> None:
        timeout_text = self.query.get("timeoutSeconds")
        stream = self.api.watch(
            self.resource,
            self.namespace,
            resource_version=self.query.get("resourceVersion") or None,
            allow_bookmarks=self.router.truthy("allowWatchBookmarks"),
            timeout_seconds=float(_int_param("timeoutSeconds", timeout_text))
            if timeout_text
            else None,
            # Each event is only serialized: the stored object itself, not a copy of it.
            shared=True,
            **self._list_kwargs(),
        )
        table: Table | None = None
        if wants_table(self.router.accept):
            table = self.router.tables.for_watch(self.definition, self._include_object())

        def encode(event: WatchEvent) -> JsonObject:
            obj = event.object
            if table is not None and event.type in ("ADDED", "MODIFIED", "DELETED"):
                obj = table.event_object(obj)
            return {"type": event.type, "object": obj}

        self.router.stream_watch(stream, encode)

    def _object_reply(self, code: int, obj: JsonObject) -> Reply:
        if wants_table(self.router.accept) and self.subresource is None:
            table = self.router.tables.render(self.definition, [obj], self._include_object())
            table["metadata"] = {"resourceVersion": obj.get("metadata", {}).get("resourceVersion")}
            return Reply(code, table)
        return Reply(code, obj)

    # ---------------------------------------------------------------- writes

    def _body_object(self) -> JsonObject:
        obj = self.router.json_body()
        if not isinstance(obj, dict):
            raise BadRequest("the request body must be a JSON object")
        metadata = obj.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise BadRequest("metadata must be an object")
        if self.resource.namespaced and self.namespace is not None:
            given = metadata.get("namespace")
            if given and given != self.namespace:
                raise BadRequest(
                    "the namespace of the provided object does not match "
                    "the namespace sent on the request"
                )
            metadata["namespace"] = self.namespace
        return obj

    def _field_validation(self) -> str:
        """kube's default is Warn: unknown fields are dropped with a warning header."""
        return self.query.get("fieldValidation") or "Warn"

    def _create(self) -> Reply:
        obj = self._body_object()
        if self.resource.namespaced and not obj["metadata"].get("namespace"):
            raise BadRequest(f"{self.resource.plural} must be created in a namespace")
        warnings: list[str] = []
        created = self.api.create(
            self.resource,
            obj,
            self.namespace,
            field_validation=self._field_validation(),
            warnings=warnings,
            shared=True,  # only serialized: the stored object itself, not a copy
        )
        return Reply(201, created, warnings=warnings)

    def _update(self) -> Reply:
        obj = self._body_object()
        name = obj["metadata"].get("name")
        if name and name != self.name:
            raise BadRequest(
                f"the name of the object ({name}) does not match the name on the URL ({self.name})"
            )
        obj["metadata"]["name"] = self.name
        assert self.name is not None
        if self.subresource == "scale":
            # A Scale is addressed by its target's name; keep the target's kind out of it.
            obj.setdefault("kind", "Scale")
            obj.setdefault("apiVersion", "autoscaling/v1")
        warnings: list[str] = []
        updated = self.api.update(
            self.resource,
            obj,
            subresource=self.subresource,
            field_validation=self._field_validation(),
            warnings=warnings,
            shared=True,  # only serialized: the stored object itself, not a copy
        )
        return Reply(200, updated, warnings=warnings)

    def _patch(self) -> Reply:
        content_type = self.router.content_type
        if content_type == _APPLY_PATCH:
            raise UnsupportedMediaType(
                "server-side apply (application/apply-patch+yaml) is not supported by the "
                "simulated API server; use client-side apply (kubectl apply without "
                "--server-side) or a merge/JSON patch"
            )
        patch_type = _PATCH_TYPES.get(content_type)
        if patch_type is None:
            supported = ", ".join(_PATCH_TYPES)
            raise UnsupportedMediaType(
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {supported}"
            )
        patch = self.router.json_body()
        if patch_type is PatchType.JSON:
            if not isinstance(patch, list):
                raise BadRequest("a JSON patch must be a list of operations")
        elif not isinstance(patch, dict):
            raise BadRequest("a merge patch must be a JSON object")
        assert self.name is not None
        warnings: list[str] = []
        patched = self.api.patch(
            self.resource,
            self.name,
            patch,
            self.namespace,
            patch_type=patch_type,
            subresource=self.subresource,
            field_validation=self._field_validation(),
            warnings=warnings,
            shared=True,  # only serialized: the stored object itself, not a copy
        )
        return Reply(200, patched, warnings=warnings)

    def _delete_options(self) -> _DeleteOptions:
        options = self.router.json_body() or {}
        if not isinstance(options, dict):
            raise BadRequest("DeleteOptions must be a JSON object")
        refuse_dry_run(self.query, options)
        policy_text = self.query.get("propagationPolicy") or options.get("propagationPolicy")
        orphan_dependents = options.get("orphanDependents")
        if not policy_text and isinstance(orphan_dependents, bool):
            policy_text = "Orphan" if orphan_dependents else "Background"
        policy: PropagationPolicy | None = None
        if policy_text:
            try:
                policy = PropagationPolicy(policy_text)
            except ValueError:
                raise BadRequest(f"unknown propagationPolicy {policy_text!r}") from None
        grace_text = self.query.get("gracePeriodSeconds")
        grace = options.get("gracePeriodSeconds")
        if grace_text:
            grace = _int_param("gracePeriodSeconds", grace_text)
        wanted = options.get("preconditions") or {}
        preconditions = None
        if wanted.get("uid") or wanted.get("resourceVersion"):
            preconditions = Preconditions(
                uid=wanted.get("uid"), resource_version=wanted.get("resourceVersion")
            )
        return _DeleteOptions(
            options, preconditions, policy, int(grace) if grace is not None else None
        )

    def _delete(self) -> Reply:
        options, preconditions, policy, grace = self._delete_options()
        assert self.name is not None
        result = self.api.delete_with_result(
            self.resource,
            self.name,
            self.namespace,
            preconditions=preconditions,
            propagation_policy=policy,
            grace_period_seconds=grace,
        )
        # kube-apiserver answers 200 whether the object went or stays for finalizers; 202 only
        # when it stays and the client asked for a cascade the legacy way (orphanDependents:
        # false), a compatibility rule of its delete handler.
        legacy_cascade = options.get("orphanDependents") is False
        return Reply(202 if legacy_cascade and not result.deleted else 200, result.object)

    def _delete_collection(self) -> Reply:
        _options, _preconditions, policy, grace = self._delete_options()
        result = self.api.list(self.resource, self.namespace, **self._list_kwargs())
        deleted = []
        for item in result.items:
            metadata = item.get("metadata", {})
            with contextlib.suppress(NotFound):  # gone meanwhile: nothing left to delete
                deleted.append(
                    self.api.delete(
                        self.resource,
                        metadata["name"],
                        metadata.get("namespace"),
                        propagation_policy=policy,
                        grace_period_seconds=grace,
                    )
                )
        return Reply(
            200,
            {
                "kind": self.definition.list_kind,
                "apiVersion": self.resource.api_version,
                "metadata": {"resourceVersion": result.resource_version},
                "items": deleted,
            },
        )

    def _evict(self) -> Reply:
        eviction = self.router.json_body() or {}
        if not isinstance(eviction, dict):
            raise BadRequest("the Eviction must be a JSON object")
        name = eviction.get("metadata", {}).get("name")
        if name and name != self.name:
            raise BadRequest(f"the eviction is for {name} but was posted to {self.name}")
        options = eviction.get("deleteOptions") or {}
        refuse_dry_run(self.query, options)
        grace = options.get("gracePeriodSeconds") if isinstance(options, dict) else None
        assert self.name is not None
        if self.namespace is None:
            raise BadRequest("evictions are namespaced")
        self.api.evict(
            self.name,
            self.namespace,
            grace_period_seconds=int(grace) if grace is not None else None,
        )
        return Reply(
            201,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            },
        )

    def _bind(self, name: str) -> Reply:
        """``pods/NAME/binding``: kube-scheduler's bind (``InMemoryAPIServer.bind``); 201 with a
        Success Status, as ``BindingREST.Create`` answers."""
        if self.namespace is None:
            raise BadRequest("bindings are namespaced")
        self.api.bind(self.router.json_body(), self.namespace, name)
        return Reply(201, {**_SUCCESS})

    def _create_binding(self, method: str) -> Reply:
        """``POST /api/v1/namespaces/NS/bindings``, the deprecated collection
        (``InMemoryAPIServer.create_binding``): only that path and verb are routed, as kube
        routes a ``rest.Creater`` (no name, no list, no cluster-wide path)."""
        if self.namespace is None or self.name is not None:
            raise NotFound("the server could not find the requested resource")
        if method != "POST":
            raise MethodNotAllowed(f"{method} is not supported on this path")
        self.api.create_binding(self.router.json_body(), self.namespace)
        return Reply(201, {**_SUCCESS})


_SUCCESS: JsonObject = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Success",
    "code": 201,
}


def _int_param(name: str, text: str | None) -> int:
    try:
        return int(text or "")
    except ValueError:
        raise BadRequest(f"{name} must be an integer, not {text!r}") from None
