"""Exact local copies of the NodeClaims and of each scalable resource's Machines, brought up to
date before every read by draining a watch instead of listing again.

Launch decides from one fresh read of every NodeClaim and of the resource's Machines (``launch``
module docstring), and the lifecycle controller calls ``create`` for every NodeClaim in flight
every few seconds. Listing on every call costs O(N) per call, so a burst of N NodeClaims cost
O(N^2) reads and copies: most of the wall time of the 500-node anti-affinity scenario. A
``Mirror`` lists once, then before every read asks the API server for the events since the
resourceVersion it has reached: a watch with ``timeout_seconds=0`` delivers what is already
there and ends with a bookmark at the server's current resourceVersion. A read therefore sees
exactly what a list made at that moment would, for the price of the changes since the last
read. A 410 Gone relists; any other error propagates, as a failed list did.

Only a client whose zero-timeout watch drains without blocking allows that, which the
``KubeClient`` port declares (``drains_zero_timeout_watch``): the in-memory API server
(simulator, tests, ``-f`` manifests), and the official client only when told to poll the
simulated API server (``poll_watches``). A drain that ends before its closing bookmark (a
dropped connection) is not known to be complete, so the mirror lists instead of trusting it.

Against a real kube-apiserver such a watch would block for its default timeout. There the
mirror lists once and then follows a watch on a thread of its own, and a read first waits until
that watch has reached every write this process made to the resource that the mirror's
namespace and selector may cover (the client's ``write_log``, ``core.kube.writelog``): read your
own writes, which is what the launch arithmetic needs (a bind it wrote must not look free to the
next call). Writes by others show when their events arrive, a moment after the write, as a list
made at that moment could have missed them too. When the watch has not caught up within
``barrier_seconds``, when it ended, or when a write's resourceVersion is not an integer, the read
lists afresh and the watch starts again from that list. A client without a write log gets a list
on every read.

``ClusterMirrors`` also holds, only where mirrors follow watches (``ClusterMirrors.watched``),
one copy of every MachineDeployment, MachineSet and MachinePool: what launch scales and drift
compares against, read from here instead of a ``GET`` per NodeClaim (issue 28). Such a copy
may lag others' writes, which is safe where the write it leads to carries the resourceVersion
as precondition (a 409, then a ``GET``: ``launch_reads``) or where a lag only delays a
verdict (``drift``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Generic, TypeVar

from karpenter_capi.plugin_api import KubeClient, PluginContext, Resource
from karpenter_capi.plugin_api.kube import (
    NODECLAIMS,
    CapiResources,
    CompiledSelector,
    Gone,
    JsonObject,
    WriteLog,
    error_from_status,
    object_key,
)
from karpenter_capi.plugins.generic_capi import feed
from karpenter_capi.plugins.generic_capi.binding import (
    ClaimFacts,
    MachineFacts,
    claim_facts,
    machine_facts,
)
from karpenter_capi.plugins.generic_capi.feed import Feed
from karpenter_capi.plugins.generic_capi.scaling import ResourceRef
from karpenter_capi.plugins.generic_capi.shared_read import SharedRead

T = TypeVar("T")


def _version(raw: JsonObject) -> int | None:
    """An object's resourceVersion as an integer (kube-apiserver's etcd revision), or ``None``."""
    rv = (raw.get("metadata") or {}).get("resourceVersion")
    return int(rv) if isinstance(rv, str) and rv.isdigit() else None


class Mirror(Generic[T]):
    """One resource (optionally one namespace and label selector) as facts ``T``, by key.

    ``read()`` returns the objects in key order (the order of a list) as of the moment of the
    call, in a list of the caller's own. With ``group``, ``read_groups()`` returns them
    grouped by that function's value (objects it maps to ``None`` are left out), each group a
    tuple in key order; only the groups that changed since the last read are rebuilt. Thread-safe:
    reads that come while the mirror catches up share its next catch-up (``SharedRead``).
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        transform: Callable[[JsonObject], T],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        group: Callable[[T], str | None] | None = None,
        barrier_seconds: float | None = None,
    ) -> None:
        self._client = client
        self._resource = resource
        self._transform = transform
        self._namespace = namespace
        self._label_selector = label_selector
        self._group = group
        self._lock = threading.Lock()
        self._items: dict[str, T] = {}
        self._ordered: list[T] | None = None
        self._groups: dict[str, dict[str, T]] = {}
        self._group_of: dict[str, str] = {}
        self._frozen: dict[str, tuple[T, ...]] = {}
        """Groups as tuples, as of the last read; a changed group is dropped until the next."""
        self._rv: str | None = None
        self._versions: dict[str, int] = {}
        """The resourceVersion of each object held, when it is an integer."""
        self._ahead: dict[str, int] = {}
        """Objects the copy took from a ``GET`` (``saw``): the watch's older events for them
        are ignored until it passes that resourceVersion."""
        self._gone: set[str] = set()
        """Objects a ``GET`` found gone (``gone``): left out until the watch deletes them."""
        self._drains = client.drains_zero_timeout_watch
        log = getattr(client, "write_log", None)
        self._feed: Feed[T] | None = None
        if not self._drains and isinstance(log, WriteLog):
            self._feed = Feed(
                client,
                resource,
                log,
                self._lock,
                put=self._event,
                holds=lambda key: key in self._items,
                transform=transform,
                namespace=namespace,
                label_selector=label_selector,
                barrier_seconds=feed.BARRIER_SECONDS
                if barrier_seconds is None
                else barrier_seconds,
            )
        self._shared = SharedRead(self._sync)
        self.lists = 0
        """How many times the mirror listed (for tests)."""

    def read(self) -> list[T]:
        self._shared()
        with self._lock:
            if self._ordered is None:
                self._ordered = [self._items[key] for key in sorted(self._items)]
            return list(self._ordered)

    def read_groups(self) -> Mapping[str, tuple[T, ...]]:
        self._shared()
        with self._lock:
            for value, members in self._groups.items():
                if value not in self._frozen:
                    self._frozen[value] = tuple(members[key] for key in sorted(members))
            return dict(self._frozen)

    def find(self, key: str) -> T | None:
        """Object ``key`` as of the moment of the call; ``None`` when the copy does not hold it."""
        self._shared()
        with self._lock:
            return self._items.get(key)

    def saw(self, raw: JsonObject) -> T:
        """Take ``raw``, just read from the API, into the copy when it is newer than what the
        copy holds (module docstring: after a 409, the copy may lag others' writes); its
        facts either way."""
        value = self._transform(raw)
        key, version = object_key(raw), _version(raw)
        if version is None:
            return value
        with self._lock:
            held = self._versions.get(key)
            if held is None or held < version:
                self._gone.discard(key)
                self._ahead[key] = version
                self._put(key, value, version)
        return value

    def gone(self, key: str) -> None:
        """The API says object ``key`` does not exist (a ``GET`` answered 404): leave it out
        until the watch delivers its deletion or the mirror lists again."""
        with self._lock:
            if key in self._items:
                self._gone.add(key)
                self._ahead.pop(key, None)
                self._put(key, None)

    def _sync(self) -> None:
        """Bring the copy up to date; one call at a time (``SharedRead``), so reads that wait
        meanwhile share the next one, which begins after they asked."""
        with self._lock:
            if self._feed is not None:
                self._follow()
            elif self._rv is None or not self._drains or not self._catch_up():
                self._relist()

    @property
    def waits(self) -> int:
        """Reads that waited for the watch to show this process's writes (for tests)."""
        return 0 if self._feed is None else self._feed.waits

    def close(self) -> None:
        """Stop following the watch (a later read lists and follows it again)."""
        with self._lock:
            if self._feed is not None:
                self._feed.stop()

    def _follow(self) -> None:
        """Up to date from the watch when it has reached this process's writes, else from a
        list, after which the watch is followed again from there."""
        assert self._feed is not None
        if self._feed.caught_up():
            return
        cursor = self._feed.before_list()
        self._relist()
        if self._rv is None or not self._feed.start(cursor, self._rv):
            self._feed = None  # resourceVersions that cannot be compared: list on every read

    def _relist(self) -> None:
        listed = self._client.list(
            self._resource, self._namespace, label_selector=self._label_selector
        )
        self._items, self._groups, self._group_of, self._frozen = {}, {}, {}, {}
        self._versions, self._ahead, self._gone = {}, {}, set()
        for raw in listed.items:
            self._put(object_key(raw), self._transform(raw), _version(raw))
        self._ordered = None
        self._rv = listed.resource_version
        self.lists += 1

    def _event(self, key: str, obj: T | None, version: int | None) -> None:
        """Apply one watch event (``obj`` ``None``: deleted) at resourceVersion ``version``,
        unless the copy already holds a newer read of that object (``saw``, ``gone``)."""
        if key in self._gone:
            if obj is not None:
                return
            self._gone.discard(key)
        ahead = self._ahead.get(key)
        if ahead is not None:
            if version is not None and version < ahead:
                return
            del self._ahead[key]
        self._put(key, obj, version)

    def _put(self, key: str, obj: T | None, version: int | None = None) -> None:
        """Store (or with ``None`` remove) one object, keeping its group up to date."""
        if obj is None:
            self._items.pop(key, None)
            self._versions.pop(key, None)
        else:
            self._items[key] = obj
            if version is None:
                self._versions.pop(key, None)
            else:
                self._versions[key] = version
        self._ordered = None
        if self._group is None:
            return
        old = self._group_of.pop(key, None)
        if old is not None:
            self._groups[old].pop(key, None)
            if not self._groups[old]:
                del self._groups[old]
            self._frozen.pop(old, None)
        new = None if obj is None else self._group(obj)
        if obj is not None and new is not None:
            self._groups.setdefault(new, {})[key] = obj
            self._group_of[key] = new
            self._frozen.pop(new, None)

    def _catch_up(self) -> bool:
        """Apply the events since the last read; False when a relist is needed instead."""
        stream = self._client.watch(
            self._resource,
            self._namespace,
            resource_version=self._rv,
            label_selector=self._label_selector,
            allow_bookmarks=True,
            timeout_seconds=0,
        )
        complete = False  # the drain ends with a bookmark at the server's resourceVersion
        try:
            for event in stream:
                complete = event.type == "BOOKMARK"
                if event.type == "ERROR":
                    error = error_from_status(event.object)
                    if isinstance(error, Gone):
                        return False
                    raise error
                if event.type != "BOOKMARK":
                    key = object_key(event.object)
                    gone = event.type == "DELETED"
                    value = None if gone else self._transform(event.object)
                    rv = event.resource_version
                    self._event(key, value, int(rv) if rv and rv.isdigit() else None)
                if event.resource_version:
                    self._rv = event.resource_version
        except Gone:
            return False
        finally:
            stream.close()
        return complete


CHOOSING: Final = ""
"""The group of the NodeClaims that wait on no resource yet: their first ``create`` is still to
come (or its result is not written yet)."""


def _waiting_on(claim: ClaimFacts) -> str | None:
    """The resource a NodeClaim may be waiting on: its intent (``CHOOSING`` without one),
    unless it is deleting or already knows its Machine (``planning.waiting_claims`` checks the
    rest against the Machines)."""
    if claim.deleting or claim.provider_id or claim.machine_ref is not None:
        return None
    return claim.intent


class WaitingClaims:
    """One read of the NodeClaims that may be waiting, by the key of the resource they wait on
    (``CHOOSING`` for those that wait on none yet)."""

    def __init__(self, by_resource: Mapping[str, Sequence[ClaimFacts]]) -> None:
        self.by_resource = by_resource
        self._by_name: dict[str, ClaimFacts] | None = None

    def on(self, ref: ResourceRef) -> Sequence[ClaimFacts]:
        return self.by_resource.get(ref.key, ())

    @property
    def choosing(self) -> Sequence[ClaimFacts]:
        """The NodeClaims that may be waiting and name no resource yet."""
        return self.by_resource.get(CHOOSING, ())

    def find(self, name: str) -> ClaimFacts | None:
        """NodeClaim ``name`` if this read shows it possibly waiting, on any resource or none."""
        if self._by_name is None:
            self._by_name = {c.name: c for group in self.by_resource.values() for c in group}
        return self._by_name.get(name)


class ClusterMirrors:
    """The mirrors one plugin context reads: every NodeClaim, and the Machines of each scalable
    resource it has touched (by that resource's label, never all Machines)."""

    def __init__(
        self,
        management: KubeClient,
        workload: KubeClient,
        capi: CapiResources,
        *,
        barrier_seconds: float | None = None,
        kinds: KindMirrors | None = None,
    ) -> None:
        self._management = management
        self._capi = capi
        self._barrier_seconds = barrier_seconds
        self._claims: Mirror[ClaimFacts] = Mirror(
            workload, NODECLAIMS, claim_facts, group=_waiting_on, barrier_seconds=barrier_seconds
        )
        self._lock = threading.Lock()
        self._machines: dict[str, Mirror[MachineFacts]] = {}
        self._kinds = (
            KindMirrors(management, barrier_seconds=barrier_seconds) if kinds is None else kinds
        )
        self.watched = follows_watches(management)
        """Whether the management cluster's mirrors follow watches (a client with a write log
        that cannot drain one: the official client against a real API server). Only then does
        a read from a mirror cost no request, so only then do ``scalable``, ``machine_set`` and
        ``machine`` answer from mirrors; elsewhere every mirror read drains a watch, a request
        as a ``GET`` is, and their callers ``GET``."""

    def claims(self) -> list[ClaimFacts]:
        """Every NodeClaim, as a list made now would show them."""
        return self._claims.read()

    def waiting(self) -> WaitingClaims:
        """The NodeClaims that may be waiting on a resource, as a list made now would show them
        (a superset of what ``planning.waiting_claims`` keeps, for the price of one group)."""
        return WaitingClaims(self._claims.read_groups())

    def machines_of(self, ref: ResourceRef) -> list[MachineFacts]:
        """The Machines of ``ref`` (its deployment-, set- or pool-name label), as of now."""
        return self._machines_mirror(ref).read()

    def machine(self, ref: ResourceRef, namespace: str, name: str) -> MachineFacts | None:
        """Machine ``namespace/name`` from the mirror of ``ref``'s Machines, as of now;
        ``None`` when that mirror does not hold it (not ``ref``'s, or gone: ask the API)."""
        return self._machines_mirror(ref).find(f"{namespace}/{name}")

    def _machines_mirror(self, ref: ResourceRef) -> Mirror[MachineFacts]:
        with self._lock:
            mirror = self._machines.get(ref.key)
            if mirror is None:
                mirror = Mirror(
                    self._management,
                    self._capi.machines,
                    machine_facts,
                    namespace=ref.namespace,
                    label_selector=ref.machine_selector,
                    barrier_seconds=self._barrier_seconds,
                )
                self._machines[ref.key] = mirror
        return mirror

    def scalable(self, ref: ResourceRef) -> JsonObject | None:
        """Scalable resource ``ref`` as its kind's mirror holds it now (every object of the
        kind, shared between calls: read-only); ``None`` when the mirror does not hold it."""
        return self._kinds(ref.resource(self._capi)).find(f"{ref.namespace}/{ref.name}")

    def machine_set(self, namespace: str, name: str) -> JsonObject | None:
        """MachineSet ``namespace/name`` as the MachineSets' mirror holds it now, or ``None``."""
        return self._kinds(self._capi.machine_sets).find(f"{namespace}/{name}")

    def saw_scalable(self, ref: ResourceRef, raw: JsonObject | None) -> None:
        """``ref`` just read from the API (``None``: it answered 404): its kind's mirror, if
        any, takes the answer when newer (``Mirror.saw``, ``Mirror.gone``)."""
        mirror = self._kinds.made(ref.resource(self._capi))
        if mirror is None:
            return
        if raw is None:
            mirror.gone(f"{ref.namespace}/{ref.name}")
        else:
            mirror.saw(raw)

    def saw_machine(self, ref: ResourceRef, raw: JsonObject) -> MachineFacts:
        """A Machine of ``ref`` just read from the API (after a 409): the mirror of ``ref``'s
        Machines takes it when newer (``Mirror.saw``), or leaves it out when it no longer
        carries ``ref``'s label."""
        facts = machine_facts(raw)
        with self._lock:
            mirror = self._machines.get(ref.key)
        if mirror is None:
            return facts
        label, _, value = ref.machine_selector.partition("=")
        if facts.labels.get(label) != value:
            mirror.gone(facts.key)
            return facts
        return mirror.saw(raw)

    def machine_gone(self, ref: ResourceRef, key: str) -> None:
        """The API has no Machine ``key`` (a ``GET`` answered 404): ``ref``'s mirror leaves it
        out (``Mirror.gone``)."""
        with self._lock:
            mirror = self._machines.get(ref.key)
        if mirror is not None:
            mirror.gone(key)

    def close(self) -> None:
        """Stop following every watch."""
        with self._lock:
            machines = list(self._machines.values())
        self._claims.close()
        for mirror in machines:
            mirror.close()
        self._kinds.close()


def follows_watches(client: KubeClient) -> bool:
    """Whether ``client``'s mirrors follow watches (a write log, and a zero-timeout watch that
    does not drain: the official client against a real API server), so that reading a mirror
    costs no request. Elsewhere every mirror read drains a watch, a request as a list is."""
    return not client.drains_zero_timeout_watch and isinstance(
        getattr(client, "write_log", None), WriteLog
    )


def _as_listed(raw: JsonObject) -> JsonObject:
    return raw


class KindMirrors:
    """One copy of every object of a kind the management client sees (in fleet mode: its
    Cluster's), by resource: what launch scales and drift compares (``ClusterMirrors``) and
    what the NodeClass selections list (``WatchedLists``, filtering by their label selector).
    One watch per kind and cluster, however many readers and selectors. The objects are shared
    between calls: read-only."""

    def __init__(self, client: KubeClient, *, barrier_seconds: float | None = None) -> None:
        self._client = client
        self._barrier_seconds = barrier_seconds
        self._lock = threading.Lock()
        self._mirrors: dict[str, Mirror[JsonObject]] = {}

    @classmethod
    def shared(cls, ctx: PluginContext) -> KindMirrors:
        """The one kept for ``ctx``'s cluster (``PluginContext.state``), shared by plugins."""
        client = ctx.management
        return ctx.state(cls, lambda: cls(client))

    def __call__(self, resource: Resource) -> Mirror[JsonObject]:
        with self._lock:
            mirror = self._mirrors.get(resource.group_resource)
            if mirror is None:
                mirror = Mirror(
                    self._client, resource, _as_listed, barrier_seconds=self._barrier_seconds
                )
                self._mirrors[resource.group_resource] = mirror
        return mirror

    def made(self, resource: Resource) -> Mirror[JsonObject] | None:
        """``resource``'s mirror if one was made (a reader asked for it), else ``None``."""
        with self._lock:
            return self._mirrors.get(resource.group_resource)

    def close(self) -> None:
        """Stop following every watch."""
        with self._lock:
            mirrors = list(self._mirrors.values())
        for mirror in mirrors:
            mirror.close()


class WatchedLists:
    """Lists of the management cluster answered from the watch-fed copy of each kind
    (``KindMirrors``), filtered by the list's label selector as the API server would: what the
    NodeClass's selection reads on every launch call (four lists over a real API). Only where
    mirrors follow watches (``follows_watches``); elsewhere ``shared`` says ``None`` and the
    caller lists, as a drained mirror would cost a request per read anyway. The objects are
    shared between calls: read-only.

    Before, each selector had a watch of its own beside the kind's (issue 28: 100 to 300 more
    watches, and threads, at 100 clusters); a read now waits, as launch's reads of the kind
    do, for this process's writes to any object of the kind to show, not only to the selected.
    """

    def __init__(self, kinds: KindMirrors) -> None:
        self._kinds = kinds

    @classmethod
    def shared(cls, ctx: PluginContext) -> WatchedLists | None:
        if not follows_watches(ctx.management):
            return None
        kinds = KindMirrors.shared(ctx)  # not in the factory: ``state`` holds its lock there
        return ctx.state(cls, lambda: cls(kinds))

    def __call__(self, resource: Resource, selector: CompiledSelector) -> list[JsonObject]:
        """The objects a list with ``selector`` would return now, in its order (``NotFound``
        when the kind is not served)."""
        return [
            obj
            for obj in self._kinds(resource).read()
            if selector.matches((obj.get("metadata") or {}).get("labels") or {})
        ]

    def close(self) -> None:
        """Stop following every watch."""
        self._kinds.close()
