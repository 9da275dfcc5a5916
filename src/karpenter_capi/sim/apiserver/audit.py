"""Which requests one client made, as an authorizer sees them: an audit log for RBAC.

``RequestCounts`` says how much load the API server carried; least-privilege RBAC needs
something else: every distinct request *the controller* made, spelled the way Kubernetes
authorizes it (verb, API group, resource, subresource, namespace, name) and tagged with the
cluster it went to (workload or management, when they are two). The server cannot tell the
controller's requests from those of the emulated cluster around it (kubelet, scheduler, Cluster
API stand-ins), which call the same object, so the recording sits on the controller's side:
``AuditingClient`` wraps the ``KubeClient`` the controller is given and records each call
before passing it on, as kube-apiserver's audit log would under the controller's
ServiceAccount.

Verbs are RBAC's: an eviction is ``create`` on ``pods/eviction``, a scheduler's binding
``create`` on ``pods/binding``; a ``watch`` and a ``list`` are themselves whatever their
timeout. ``served_versions`` is API discovery (a GET of ``/apis/<group>``), which RBAC grants
every authenticated user through ``system:discovery``; it is recorded as a non-resource
request so a check can say so instead of dropping it.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

from karpenter_capi.core.kube.client import (
    JsonObject,
    KubeClient,
    ListResult,
    PatchType,
    Preconditions,
    PropagationPolicy,
    WatchStream,
)
from karpenter_capi.core.kube.errors import MethodNotAllowed
from karpenter_capi.core.kube.resources import PODS, Resource
from karpenter_capi.sim.apiserver.subresources import PodBinder, binding_name

WORKLOAD_CLUSTER = "workload"
MANAGEMENT_CLUSTER = "management"


class AuditRecord(NamedTuple):
    """One request as RBAC sees it. ``path`` is set (and ``resource`` empty) for a
    non-resource request such as discovery; ``namespace`` is ``None`` for a cluster-scoped
    resource or a request across all namespaces."""

    cluster: str
    verb: str
    group: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None
    path: str | None = None

    def describe(self) -> str:
        """``workload: create pods/eviction in default (web-1)``, for failure messages."""
        if self.path is not None:
            return f"{self.cluster}: {self.verb} {self.path}"
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        if self.group:
            what += f".{self.group}"
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" ({self.name})" if self.name else ""
        return f"{self.cluster}: {self.verb} {what}{where}{named}"


class AuditLog:
    """The distinct requests recorded so far, with how often each was made. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[AuditRecord, int] = {}

    def record(self, entry: AuditRecord) -> None:
        with self._lock:
            self._counts[entry] = self._counts.get(entry, 0) + 1

    def records(self) -> builtins.list[AuditRecord]:
        """Every distinct request, in a stable order."""
        with self._lock:
            return sorted(self._counts, key=lambda r: tuple(str(part) for part in r))

    def count(self, entry: AuditRecord) -> int:
        with self._lock:
            return self._counts.get(entry, 0)


class AuditingClient:
    """A ``KubeClient`` that records every request in ``log`` under ``cluster``, then makes it.

    Only the protocol is forwarded: controller code that reached past it for something a real
    client does not have would fail here, as it would against a cluster.
    """

    def __init__(self, inner: KubeClient, log: AuditLog, cluster: str = WORKLOAD_CLUSTER) -> None:
        self._inner = inner
        self.log = log
        self.cluster = cluster

    @property
    def drains_zero_timeout_watch(self) -> bool:
        return self._inner.drains_zero_timeout_watch

    def _record(
        self,
        verb: str,
        resource: Resource,
        namespace: str | None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> None:
        scope = namespace if resource.namespaced and namespace else None
        self.log.record(
            AuditRecord(
                self.cluster, verb, resource.group, resource.plural, subresource, scope, name
            )
        )

    @contextmanager
    def _writing(
        self,
        verb: str,
        resource: Resource,
        namespace: str | None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> Iterator[None]:
        """Record a write, then hand it over; ``_written`` runs once it is answered or failed."""
        self._record(verb, resource, namespace, name, subresource)
        try:
            yield
        finally:
            self._written()

    def _record_watch(
        self, resource: Resource, namespace: str | None, timeout_seconds: float | None
    ) -> None:
        """Record a watch; for subclasses that count a poll (``timeout_seconds=0``) apart."""
        self._record("watch", resource, namespace)

    def _written(self) -> None:
        """A write of this client came back (answered or failed); for subclasses."""

    @staticmethod
    def _namespace_of(obj: JsonObject, namespace: str | None = None) -> str | None:
        return namespace or (obj.get("metadata") or {}).get("namespace")

    def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> JsonObject:
        self._record("get", resource, namespace, name, subresource)
        return self._inner.get(resource, name, namespace, subresource=subresource)

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
        self._record("list", resource, namespace)
        return self._inner.list(
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
        self._record_watch(resource, namespace, timeout_seconds)
        return self._inner.watch(
            resource,
            namespace,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            allow_bookmarks=allow_bookmarks,
            timeout_seconds=timeout_seconds,
        )

    def create(
        self,
        resource: Resource,
        obj: JsonObject,
        namespace: str | None = None,
    ) -> JsonObject:
        # A create names no object to RBAC (resourceNames cannot restrict it), even when the
        # body does: the name is left out so a check cannot wrongly rely on it.
        with self._writing("create", resource, self._namespace_of(obj, namespace)):
            return self._inner.create(resource, obj, namespace)

    def update(
        self,
        resource: Resource,
        obj: JsonObject,
        *,
        subresource: str | None = None,
    ) -> JsonObject:
        meta = obj.get("metadata") or {}
        with self._writing(
            "update", resource, meta.get("namespace"), meta.get("name"), subresource
        ):
            return self._inner.update(resource, obj, subresource=subresource)

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
        with self._writing("patch", resource, namespace, name, subresource):
            return self._inner.patch(
                resource, name, patch, namespace, patch_type=patch_type, subresource=subresource
            )

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
        with self._writing("delete", resource, namespace, name):
            return self._inner.delete(
                resource,
                name,
                namespace,
                preconditions=preconditions,
                propagation_policy=propagation_policy,
                grace_period_seconds=grace_period_seconds,
            )

    def evict(self, name: str, namespace: str, *, grace_period_seconds: int | None = None) -> None:
        with self._writing("create", PODS, namespace, name, "eviction"):
            self._inner.evict(name, namespace, grace_period_seconds=grace_period_seconds)

    def bind(self, binding: JsonObject, namespace: str, name: str | None = None) -> None:
        """A scheduler's ``create`` on ``pods/binding``; only a wrapped client that binds
        (``PodBinder``: the in-memory server) can."""
        inner = self._inner
        if not isinstance(inner, PodBinder):
            raise MethodNotAllowed("this client cannot create pods/binding")
        with self._writing("create", PODS, namespace, name or binding_name(binding), "binding"):
            inner.bind(binding, namespace, name)

    def server_version(self) -> JsonObject:
        self.log.record(AuditRecord(self.cluster, "get", "", "", None, None, None, path="/version"))
        return self._inner.server_version()

    def served_versions(self, group: str) -> builtins.list[str]:
        self.log.record(
            AuditRecord(self.cluster, "get", "", "", None, None, None, path=f"/apis/{group}")
        )
        return self._inner.served_versions(group)
