"""``SharedReads``: an in-memory API server as a client whose lists and watches share, not copy.

An emulated cluster's own controllers (the kube-scheduler stand-in, the kubelet, the
ReplicaSet and Cluster API emulation) read it through in-process informers. The server hands
every watcher a private deep copy of each object it delivers, which those informers only put in
their cache; at fleet scale that copy, made for every pod status patch, was a twentieth of the
emulation's CPU. An informer's cache is read-only by contract (``core.kube.cache``: objects are
shared between controllers, not copied) and the informer itself never changes an object it
applies, so it can hold the stored objects themselves: ``list`` and ``watch`` pass
``shared=True`` (``InMemoryAPIServer.watch``), and every other verb is the server's own, with
its private copies. Stored objects are never changed in place (a write stores a new top and
metadata), so what an informer holds stays what was written at its resourceVersion.

Only for a ``Manager`` whose controllers keep that contract: the emulation's, each checked by
``tests/sim/apiserver/test_shared_reads.py``, which runs them over shared reads and finds every
version the server stored unchanged. The events and lists are the same (same objects, same
order, same resourceVersions); only the copies are gone.
"""

from __future__ import annotations

from karpenter_capi.core.kube.client import JsonObject, KubeClient, ListResult, WatchStream
from karpenter_capi.core.kube.forwarding import ForwardingClient
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.sim.apiserver.server import InMemoryAPIServer

__all__ = ["SharedReads", "create_read_only"]


class SharedReads(ForwardingClient):
    """``KubeClient`` over ``server``: ``list`` and ``watch`` share the stored objects (module
    docstring); the other verbs are the server's, forwarded (``ForwardingClient``)."""

    def __init__(self, server: InMemoryAPIServer) -> None:
        super().__init__(server)
        self.server = server

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
        return self.server.list(
            resource,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_token=continue_token,
            resource_version=resource_version,
            shared=True,
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
        return self.server.watch(
            resource,
            namespace,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            allow_bookmarks=allow_bookmarks,
            timeout_seconds=timeout_seconds,
            shared=True,
        )


def create_read_only(
    client: KubeClient, resource: Resource, body: JsonObject, namespace: str | None
) -> JsonObject:
    """``client.create``, for a caller that only reads the answer (a ReplicaSet, its new pod's
    name): from an in-memory server (itself, or under ``SharedReads``), the stored object
    itself (``InMemoryAPIServer.create``'s ``shared``), not a copy made for nothing."""
    server = client.server if isinstance(client, SharedReads) else client
    if isinstance(server, InMemoryAPIServer):
        return server.create(resource, body, namespace, shared=True)
    return client.create(resource, body, namespace)
