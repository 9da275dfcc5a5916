"""A ``KubeClient`` that passes every call to another: the base of narrowing wrappers.

Fleet mode wraps the clients each cluster's controllers get (``core.fleet.scoped`` confines the
management cluster to one Cluster, ``core.fleet.fencing`` refuses writes without the cluster's
Lease). Each changes a few verbs; writing the rest of the protocol again in each would let
them drift from it (a new keyword forwarded by one and dropped by the other). Subclasses
override the verbs they change and call ``self.inner`` (or ``super()``) for the rest.
"""

from __future__ import annotations

import builtins

from karpenter_capi.core.kube.client import (
    JsonObject,
    KubeClient,
    ListResult,
    PatchType,
    Preconditions,
    PropagationPolicy,
    WatchStream,
)
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.core.kube.writelog import WriteLog


class ForwardingClient:
    """Every ``KubeClient`` method, forwarded unchanged to ``inner``."""

    def __init__(self, inner: KubeClient) -> None:
        self.inner = inner
        log = getattr(inner, "write_log", None)
        self.write_log: WriteLog | None = log if isinstance(log, WriteLog) else None
        """The inner client's log of its writes (``None``: it keeps none), which watch-fed
        copies read their own writes through instead of listing on every read; a wrapper
        that narrows what it reads narrows this too (``core.fleet.scoped``)."""

    @property
    def drains_zero_timeout_watch(self) -> bool:
        return self.inner.drains_zero_timeout_watch

    def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> JsonObject:
        return self.inner.get(resource, name, namespace, subresource=subresource)

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
        return self.inner.list(
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
        return self.inner.watch(
            resource,
            namespace,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            allow_bookmarks=allow_bookmarks,
            timeout_seconds=timeout_seconds,
        )

    def create(
        self, resource: Resource, obj: JsonObject, namespace: str | None = None
    ) -> JsonObject:
        return self.inner.create(resource, obj, namespace)

    def update(
        self, resource: Resource, obj: JsonObject, *, subresource: str | None = None
    ) -> JsonObject:
        return self.inner.update(resource, obj, subresource=subresource)

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
        return self.inner.patch(
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
        return self.inner.delete(
            resource,
            name,
            namespace,
            preconditions=preconditions,
            propagation_policy=propagation_policy,
            grace_period_seconds=grace_period_seconds,
        )

    def evict(self, name: str, namespace: str, *, grace_period_seconds: int | None = None) -> None:
        self.inner.evict(name, namespace, grace_period_seconds=grace_period_seconds)

    def served_versions(self, group: str) -> builtins.list[str]:
        return self.inner.served_versions(group)

    def server_version(self) -> JsonObject:
        return self.inner.server_version()


__all__ = ["ForwardingClient"]
