"""Get and List: the Machines this plugin launched, found by provider ID without listing all
Machines.

The plugin API gives hooks clients, not informers, so the plugin keeps its own cache of the
Machines it bound: those carrying ``node.cluster.x-k8s.io/karpenter-member``, listed with that
label selector (never all Machines) and indexed by provider ID and by NodeClaim name.

- **Freshness.** A read older than ``cache_ttl`` (default 10 s, plugin option
  ``generic_capi.cache_ttl``) is refreshed on the next use: at most one list per call batch.
  Our own writes and reads of single Machines go into the cache at once (write-through), and a
  write that lands while a refresh is listing is applied again after it, so the cache never
  shows a Machine older than what this process wrote.
- **A miss is checked, never trusted.** ``karpenter_capi_get`` answering "gone" makes the
  garbage collector delete a NodeClaim, so a provider ID missing from the cache triggers a
  refresh (unless the cache was refreshed less than a second ago), and an ID still missing is
  reported gone only for a NodeClaim this plugin launched (it records its Machine in
  ``cluster.x-k8s.io/machine``) whose Machine is really gone; any other ID is "not mine".
- ``karpenter_capi_list`` (every couple of minutes) always lists afresh and refreshes the cache.
  It returns the member Machines that name their NodeClaim: a member label without our
  annotation may come from a Machine template, and listing such a Machine would let the
  garbage collector delete capacity this plugin never launched.

``get`` also reports what a disruption decision needs to know about the Machine's scalable
resource: ``Instance.labels["karpenter.cluster.x-k8s.io/scale-down-headroom"]`` is how many
replicas it can still lose before its ``cluster-api-autoscaler-node-group-min-size`` (absent
without a min size), so that nodes whose deletion would be refused are not chosen.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any, Final

from karpenter_capi.plugin_api import Clock, Instance, InstanceNotFoundError, KubeClient
from karpenter_capi.plugin_api.kube import CapiResources, JsonObject, NotFound
from karpenter_capi.plugins.generic_capi.binding import (
    EPOCH,
    LABEL_MEMBER,
    MachineFacts,
    machine_facts,
)
from karpenter_capi.plugins.generic_capi.mirror import ClusterMirrors
from karpenter_capi.plugins.generic_capi.scaling import (
    ResourceRef,
    owner_of,
    scale_down_headroom,
)

CACHE_TTL_OPTION: Final = "cache_ttl"
DEFAULT_CACHE_TTL: Final = 10.0
MISS_REFRESH_SECONDS: Final = 1.0
LABEL_SCALE_DOWN_HEADROOM: Final = "karpenter.cluster.x-k8s.io/scale-down-headroom"


def _reindex(
    index: dict[str, dict[str, MachineFacts]],
    key: str,
    old: str | None,
    new: str | None,
    machine: MachineFacts | None,
) -> None:
    """Move ``key`` from bucket ``old`` to bucket ``new`` (``None``: no bucket) of ``index``,
    leaving its position alone when the bucket stays the same (as a dict update would)."""
    if old is not None and old != new:
        bucket = index.get(old)
        if bucket is not None:
            bucket.pop(key, None)
            if not bucket:
                del index[old]
    if new is not None and machine is not None:
        index.setdefault(new, {})[key] = machine


class MachineCache:
    """The member Machines of one management cluster, by key, provider ID and NodeClaim."""

    def __init__(
        self, client: KubeClient, capi: CapiResources, clock: Clock, ttl: float = DEFAULT_CACHE_TTL
    ) -> None:
        self._client = client
        self._capi = capi
        self._clock = clock
        self._ttl = ttl
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._machines: dict[str, MachineFacts] = {}
        # Indexes of ``_machines`` (launch, delete and get ask on every call, so no scan):
        # NodeClaim name or provider ID -> key -> Machine, and the NodeClaims a live Machine
        # names (built on demand).
        self._by_claim: dict[str, dict[str, MachineFacts]] = {}
        self._by_provider_id: dict[str, dict[str, MachineFacts]] = {}
        self._bound: frozenset[str] | None = None
        self._refreshed_at: float | None = None
        self._during_refresh: dict[str, MachineFacts | None] | None = None
        self.refreshes = 0
        """How many times the cache listed the member Machines (for tests and metrics)."""

    # --- filling ----------------------------------------------------------------------------

    def refresh(self) -> list[MachineFacts]:
        """List the member Machines now; returns them."""
        with self._refresh_lock:
            with self._lock:
                self._during_refresh = {}
            try:
                listed = self._client.list(self._capi.machines, label_selector=LABEL_MEMBER)
            except BaseException:
                with self._lock:
                    self._during_refresh = None
                raise
            machines = {m.key: m for m in (machine_facts(raw) for raw in listed.items)}
            with self._lock:
                for key, written in (self._during_refresh or {}).items():
                    if written is None:
                        machines.pop(key, None)
                    else:
                        machines[key] = written
                self._during_refresh = None
                self._machines = {}
                self._by_claim = {}
                self._by_provider_id = {}
                for key, machine in machines.items():
                    self._put(key, machine)
                self._refreshed_at = self._clock.monotonic()
                self.refreshes += 1
                return list(machines.values())

    def _fresh(self, max_age: float) -> None:
        with self._lock:
            at = self._refreshed_at
        if at is None or self._clock.monotonic() - at >= max_age:
            self.refresh()

    def _put(self, key: str, machine: MachineFacts | None) -> None:
        """Store (``None``: drop) one Machine and keep the indexes in step; lock held."""
        old = self._machines.pop(key, None) if machine is None else self._machines.get(key)
        if machine is not None:
            self._machines[key] = machine
        _reindex(
            self._by_claim,
            key,
            None if old is None else old.claim,
            None if machine is None else machine.claim,
            machine,
        )
        _reindex(
            self._by_provider_id,
            key,
            None if old is None else old.provider_id,
            None if machine is None else machine.provider_id,
            machine,
        )
        self._bound = None

    def _record(self, key: str, machine: MachineFacts | None) -> None:
        with self._lock:
            self._put(key, machine)
            if self._during_refresh is not None:
                self._during_refresh[key] = machine

    def observe(self, machine: MachineFacts) -> None:
        """What we just read or wrote: kept when it is a member, dropped otherwise."""
        self._record(machine.key, machine if machine.member else None)

    def observe_all(self, machines: Iterable[MachineFacts]) -> None:
        """``observe`` each of ``machines`` (one lock; the ones already cached as they are, the
        usual case for a mirror's read, cost a lookup)."""
        with self._lock:
            for machine in machines:
                key = machine.key
                kept = machine if machine.member else None
                if self._during_refresh is None and self._machines.get(key) is kept:
                    continue
                self._put(key, kept)
                if self._during_refresh is not None:
                    self._during_refresh[key] = kept

    def forget(self, namespace: str, name: str) -> None:
        self._record(f"{namespace}/{name}", None)

    # --- reading ----------------------------------------------------------------------------

    def bound_to(self, claim: str) -> list[MachineFacts]:
        """Cached Machines naming NodeClaim ``claim`` (refreshed when older than the TTL)."""
        self._fresh(self._ttl)
        with self._lock:
            return list(self._by_claim.get(claim, {}).values())

    def bound_claims(self) -> AbstractSet[str]:
        """NodeClaims a live cached Machine names."""
        self._fresh(self._ttl)
        with self._lock:
            if self._bound is None:
                self._bound = frozenset(
                    claim
                    for claim, bucket in self._by_claim.items()
                    if claim and any(not m.deleting for m in bucket.values())
                )
            return self._bound

    def by_provider_id(self, provider_id: str) -> MachineFacts | None:
        """The member Machine with ``provider_id``; a miss refreshes once (rate-limited)."""
        self._fresh(self._ttl)
        found = self._lookup(provider_id)
        if found is None:
            self._fresh(MISS_REFRESH_SECONDS)
            found = self._lookup(provider_id)
        return found

    def _lookup(self, provider_id: str) -> MachineFacts | None:
        with self._lock:
            matches = list(self._by_provider_id.get(provider_id, {}).values())
        matches.sort(key=lambda m: (m.deleting, m.key))
        return matches[0] if matches else None


class ResourceCache:
    """Scalable resources by key, each read at most once per TTL (for ``get``'s headroom)."""

    def __init__(
        self, client: KubeClient, capi: CapiResources, clock: Clock, ttl: float = DEFAULT_CACHE_TTL
    ) -> None:
        self._client = client
        self._capi = capi
        self._clock = clock
        self._ttl = ttl
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, JsonObject | None]] = {}

    def get(self, ref: ResourceRef) -> JsonObject | None:
        now = self._clock.monotonic()
        with self._lock:
            entry = self._entries.get(ref.key)
        if entry is not None and entry[0] > now:
            return entry[1]
        try:
            obj: JsonObject | None = self._client.get(
                ref.resource(self._capi), ref.name, ref.namespace
            )
        except NotFound:
            obj = None
        with self._lock:
            self._entries[ref.key] = (now + self._ttl, obj)
        return obj


def to_instance(machine: MachineFacts, resource: Mapping[str, Any] | None = None) -> Instance:
    """The core's view of a Machine."""
    spec = machine.raw.get("spec")
    zone = str((spec.get("failureDomain") if isinstance(spec, Mapping) else "") or "")
    labels: dict[str, str] = {}
    headroom = None if resource is None else scale_down_headroom(resource)
    if headroom is not None:
        labels[LABEL_SCALE_DOWN_HEADROOM] = str(headroom)
    state = "deleting" if machine.deleting else (machine.phase.lower() or "pending")
    return Instance(
        name=machine.key,
        provider_id=machine.provider_id or None,
        zone=zone or None,
        nodeclaim_name=machine.claim or None,
        created_at=None if machine.created == EPOCH else machine.created,
        state=state,
        labels=labels,
    )


class Instances:
    """``karpenter_capi_get`` and ``karpenter_capi_list``."""

    def __init__(
        self,
        client: KubeClient,
        capi: CapiResources,
        cache: MachineCache,
        resources: ResourceCache,
        mirrors: ClusterMirrors,
    ) -> None:
        self._client = client
        self._capi = capi
        self._cache = cache
        self._resources = resources
        self._mirrors = mirrors

    def list(self) -> list[Instance]:
        return [to_instance(m) for m in self._cache.refresh() if m.claim]

    def get(self, provider_id: str) -> Instance | None:
        machine = self._cache.by_provider_id(provider_id)
        if machine is not None:
            owner = owner_of(machine)
            return to_instance(machine, self._resources.get(owner) if owner else None)
        return self._verify_gone(provider_id)

    def _verify_gone(self, provider_id: str) -> Instance | None:
        """A provider ID no member Machine has: gone if a NodeClaim of ours names it."""
        for claim in self._mirrors.claims():
            if claim.provider_id != provider_id or claim.machine_ref is None:
                continue
            namespace, name = claim.machine_ref
            try:
                found = machine_facts(self._client.get(self._capi.machines, name, namespace))
            except NotFound:
                raise InstanceNotFoundError(
                    provider_id, f"Machine {namespace}/{name} no longer exists"
                ) from None
            if found.provider_id == provider_id:
                return to_instance(found)
            raise InstanceNotFoundError(
                provider_id, f"Machine {namespace}/{name} now has another provider ID"
            )
        return None
