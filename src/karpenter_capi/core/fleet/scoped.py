"""The management cluster as one workload cluster's controllers may see it.

In fleet mode every workload cluster's Operator shares one management cluster, where the
Cluster API objects of every Cluster live side by side. A controller written for one cluster
lists "every MachineDeployment" and would scale another cluster's workers. ``ScopedClient``
narrows that view to what Cluster API itself groups under one Cluster: its namespace, and for
the kinds Cluster API labels with their Cluster (Machines, MachineSets, MachineDeployments,
MachinePools), the label ``cluster.x-k8s.io/cluster-name=<name>``. A request for another
namespace is refused with ``Forbidden`` naming the Cluster, as RBAC would refuse it, so a
NodeClass pointing elsewhere fails loudly instead of touching a neighbour.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import Any, Final

from karpenter_capi.core.kube.client import (
    JsonObject,
    KubeClient,
    ListResult,
    PatchType,
    Preconditions,
    PropagationPolicy,
    WatchStream,
)
from karpenter_capi.core.kube.errors import Forbidden
from karpenter_capi.core.kube.forwarding import ForwardingClient
from karpenter_capi.core.kube.resources import CAPI_GROUP, Resource
from karpenter_capi.core.kube.writelog import WriteLog, Written

CLUSTER_NAME_LABEL: Final = "cluster.x-k8s.io/cluster-name"
"""The label Cluster API puts on every object it makes for a Cluster."""

LABELLED_PLURALS: Final = frozenset(
    {"machines", "machinesets", "machinedeployments", "machinepools"}
)
"""Kinds of ``cluster.x-k8s.io`` that carry ``CLUSTER_NAME_LABEL``: lists and watches of them
are narrowed to the Cluster's."""


class ScopedClient(ForwardingClient):
    """A ``KubeClient`` over ``inner`` confined to Cluster ``namespace/name``.

    Namespaced lists and watches across all namespaces become lists of ``namespace``; any
    request naming another namespace, and any write of a cluster-scoped object, is refused.
    Cluster-scoped reads (CRDs, discovery) pass: they say nothing about another Cluster.
    """

    def __init__(self, inner: KubeClient, namespace: str, name: str) -> None:
        super().__init__(inner)
        self.namespace = namespace
        self.name = name
        if self.write_log is not None:
            # Only this Cluster's writes: its readers watch its namespace alone.
            self.write_log = _NamespaceWrites(self.write_log, namespace)

    def _refuse(self, what: str) -> Forbidden:
        return Forbidden(
            f"{what}: fleet mode confines Cluster {self.namespace}/{self.name} to namespace "
            f"{self.namespace!r} of the management cluster"
        )

    def _namespace(self, resource: Resource, namespace: str | None, verb: str) -> str | None:
        if not resource.namespaced:
            return namespace
        if namespace is None or namespace == self.namespace:
            return self.namespace
        raise self._refuse(f"{verb} {resource.plural} in namespace {namespace!r}")

    def _selector(self, resource: Resource, label_selector: str | None) -> str | None:
        if resource.group != CAPI_GROUP or resource.plural not in LABELLED_PLURALS:
            return label_selector
        own = f"{CLUSTER_NAME_LABEL}={self.name}"
        return f"{label_selector},{own}" if label_selector else own

    def _writable(self, resource: Resource, namespace: str | None, verb: str) -> str | None:
        if not resource.namespaced:
            raise self._refuse(f"{verb} cluster-scoped {resource.plural}")
        return self._namespace(resource, namespace, verb)

    def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> JsonObject:
        scoped = self._namespace(resource, namespace, "get")
        return self.inner.get(resource, name, scoped, subresource=subresource)

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
            self._namespace(resource, namespace, "list"),
            label_selector=self._selector(resource, label_selector),
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
            self._namespace(resource, namespace, "watch"),
            resource_version=resource_version,
            label_selector=self._selector(resource, label_selector),
            field_selector=field_selector,
            allow_bookmarks=allow_bookmarks,
            timeout_seconds=timeout_seconds,
        )

    def create(
        self, resource: Resource, obj: JsonObject, namespace: str | None = None
    ) -> JsonObject:
        given = namespace or (obj.get("metadata") or {}).get("namespace")
        return self.inner.create(resource, obj, self._writable(resource, given, "create"))

    def update(
        self, resource: Resource, obj: JsonObject, *, subresource: str | None = None
    ) -> JsonObject:
        self._writable(resource, (obj.get("metadata") or {}).get("namespace"), "update")
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
        scoped = self._writable(resource, namespace, "patch")
        return self.inner.patch(
            resource, name, patch, scoped, patch_type=patch_type, subresource=subresource
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
            self._writable(resource, namespace, "delete"),
            preconditions=preconditions,
            propagation_policy=propagation_policy,
            grace_period_seconds=grace_period_seconds,
        )

    def evict(self, name: str, namespace: str, *, grace_period_seconds: int | None = None) -> None:
        if namespace != self.namespace:
            raise self._refuse(f"evict pods in namespace {namespace!r}")
        self.inner.evict(name, namespace, grace_period_seconds=grace_period_seconds)


__all__ = ["CLUSTER_NAME_LABEL", "LABELLED_PLURALS", "ScopedClient"]


class _NamespaceWrites(WriteLog):
    """``log``'s writes in ``namespace`` (and those whose namespace the answer did not say).

    The management client is shared by every Cluster of the fleet, so its log holds every
    Cluster's writes; a copy fed by a watch of this Cluster's namespace never sees another
    namespace's events, and waiting for them would only end in a relist.
    """

    def __init__(self, log: WriteLog, namespace: str) -> None:
        super().__init__(capacity=0)
        self._log = log
        self._namespace = namespace

    def record(self, resource: Resource, answer: Mapping[str, Any], *, whole: bool) -> None:
        self._log.record(resource, answer, whole=whole)

    def end(self, resource: Resource) -> int:
        return self._log.end(resource)

    def since(self, resource: Resource, cursor: int) -> tuple[Sequence[Written] | None, int]:
        writes, end = self._log.since(resource, cursor)
        if writes is None:
            return None, end
        return tuple(w for w in writes if w.namespace in (None, self._namespace)), end
