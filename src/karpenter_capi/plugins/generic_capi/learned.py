"""The overhead real Nodes show: learned once per scalable resource, remembered, refreshed when
its template changes.

Whatever the settings say, a Node's ``status.capacity - status.allocatable`` is what its kubelet
actually keeps (kube-reserved, system-reserved, the hard eviction thresholds, whatever the
bootstrap wrote), so once a scalable resource has one Node it is the best answer for its next
nodes (``overhead`` ranks it under the explicit settings only).

- **Which Nodes.** A MachineDeployment's or MachineSet's Machines (its ``deployment-name`` or
  ``set-name`` label) that are not being deleted, through their ``status.nodeRef``; a
  MachinePool's ``status.nodeRefs``. The newest Machine's Node first; a Node counts once it
  reports cpu and memory in both capacity and allocatable.
- **Remembered** per resource with the template identity it was learned under: the
  infrastructure template and bootstrap config references (kind and name) and the bootstrap
  data secret. While they stay the same, nothing is read again.
- **Refreshed** when they change: the learned value is dropped, and only a Node created after
  the change was seen counts, so the old template's Nodes (still running during a rollout) do
  not teach the new one. What changes inside a template of the same name is not seen (CAPI
  treats templates as immutable and rolls out by new name). A process that starts after a
  change cannot tell old Nodes from new and takes the newest.
- **Cost.** Nothing is read for a resource with no replicas; otherwise an unlearned resource
  is looked at most once per ``retry_seconds`` (30 s) on the injected clock: one list of its
  Machines (by label) and a get per candidate Node.

API errors are logged and retried later; the inventory falls through to the next source.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from karpenter_capi.plugin_api import Clock, KubeClient, PluginContext, Resource, ResourceList
from karpenter_capi.plugin_api.karpenter import ResourceListError, parse_timestamp
from karpenter_capi.plugin_api.kube import NODES, ApiError, CapiResources, NotFound
from karpenter_capi.plugins.generic_capi.overhead import LearnedOverhead
from karpenter_capi.plugins.generic_capi.scaling import ResourceRef
from karpenter_capi.plugins.generic_capi.selection import MACHINE_POOL

log = logging.getLogger(__name__)

DEFAULT_RETRY_SECONDS: Final = 30.0


def _ref_identity(ref: Any) -> tuple[str, str]:
    if not isinstance(ref, Mapping):
        return ("", "")
    return (str(ref.get("kind") or ""), str(ref.get("name") or ""))


def template_identity(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """What names a scalable resource's node template: infrastructure template, bootstrap
    config and data secret references."""
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    bootstrap = spec.get("bootstrap") or {}
    if not isinstance(bootstrap, Mapping):
        bootstrap = {}
    return (
        *_ref_identity(spec.get("infrastructureRef")),
        *_ref_identity(bootstrap.get("configRef")),
        str(bootstrap.get("dataSecretName") or ""),
    )


@dataclass
class _Entry:
    identity: tuple[str, ...]
    since: datetime | None
    """When the identity was seen to change (``None``: first seen, any Node counts)."""
    learned: LearnedOverhead | None = None
    next_look: float = 0.0


def _created(obj: Mapping[str, Any]) -> datetime | None:
    raw = (obj.get("metadata") or {}).get("creationTimestamp")
    try:
        return parse_timestamp(str(raw)) if raw else None
    except ValueError:
        return None


def node_overhead(node: Mapping[str, Any]) -> LearnedOverhead | None:
    """``status.capacity - status.allocatable`` of ``node``; ``None`` until it reports both
    (with cpu and memory) or when they are malformed."""
    status = node.get("status") or {}
    try:
        capacity = ResourceList.parse(status.get("capacity") or {})
        allocatable = ResourceList.parse(status.get("allocatable") or {})
    except (ResourceListError, TypeError):
        return None
    if any(name not in capacity or name not in allocatable for name in ("cpu", "memory")):
        return None
    reserved = {
        name: capacity.milli(name) - allocatable.milli(name)
        for name in capacity
        if name != "pods" and name in allocatable
    }
    name = str((node.get("metadata") or {}).get("name") or "")
    kept = {key: value for key, value in reserved.items() if value > 0}
    return LearnedOverhead(node=name, reserved=ResourceList.from_milli(kept))


class NodeOverheads:
    """Learned overhead per scalable resource of one management cluster. Thread-safe."""

    def __init__(
        self,
        management: KubeClient,
        workload: KubeClient,
        capi: CapiResources,
        clock: Clock,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ) -> None:
        self._management = management
        self._workload = workload
        self._capi = capi
        self._clock = clock
        self._retry = retry_seconds
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    @classmethod
    def shared(cls, ctx: PluginContext, capi: CapiResources) -> NodeOverheads:
        """One per cluster ``ctx`` serves, so every inventory round remembers what was learned."""
        return ctx.state(cls, lambda: cls(ctx.management, ctx.workload, capi, ctx.clock))

    def learned(self, resource: Resource, obj: Mapping[str, Any]) -> LearnedOverhead | None:
        """What a Node of ``obj`` (a scalable resource of kind ``resource.kind``) showed."""
        meta = obj.get("metadata") or {}
        ref = ResourceRef(resource.kind, str(meta.get("namespace") or ""), str(meta.get("name")))
        identity = template_identity(obj)
        now = self._clock.monotonic()
        with self._lock:
            entry = self._entries.get(ref.key)
            if entry is None:
                entry = self._entries[ref.key] = _Entry(identity, since=None)
            elif entry.identity != identity:
                log.info("%s: node template changed; learning its overhead again", ref)
                # Whole seconds: that is all a creationTimestamp keeps.
                changed = self._clock.now().replace(microsecond=0)
                entry = self._entries[ref.key] = _Entry(identity, since=changed)
            if entry.learned is not None or now < entry.next_look:
                return entry.learned
            entry.next_look = now + self._retry
            since = entry.since
        if not _has_replicas(obj):
            return None
        try:
            found = self._look(ref, obj, since)
        except ApiError as exc:
            log.warning("%s: cannot read its Nodes to learn their overhead: %s", ref, exc)
            return None
        if found is not None:
            with self._lock:
                current = self._entries.get(ref.key)
                if current is not None and current.identity == identity:
                    current.learned = found
            log.info("%s: learned node overhead from Node %s", ref, found.node)
        return found

    def _candidates(self, ref: ResourceRef, obj: Mapping[str, Any]) -> list[str]:
        """Node names of the resource, newest Machine first."""
        if ref.kind == MACHINE_POOL:
            refs = (obj.get("status") or {}).get("nodeRefs") or []
            names = [str(r.get("name")) for r in refs if isinstance(r, Mapping) and r.get("name")]
            return list(reversed(names))
        machines = self._management.list(
            self._capi.machines, ref.namespace, label_selector=ref.machine_selector
        ).items
        alive = [m for m in machines if not (m.get("metadata") or {}).get("deletionTimestamp")]
        alive.sort(key=lambda m: str((m.get("metadata") or {}).get("creationTimestamp") or ""))
        names = []
        for machine in reversed(alive):
            node_ref = (machine.get("status") or {}).get("nodeRef") or {}
            if isinstance(node_ref, Mapping) and node_ref.get("name"):
                names.append(str(node_ref["name"]))
        return names

    def _look(
        self, ref: ResourceRef, obj: Mapping[str, Any], since: datetime | None
    ) -> LearnedOverhead | None:
        for name in self._candidates(ref, obj):
            try:
                node = self._workload.get(NODES, name)
            except NotFound:
                continue
            created = _created(node)
            if since is not None and (created is None or created < since):
                continue  # made from the template before the change
            found = node_overhead(node)
            if found is not None:
                return found
        return None


def _has_replicas(obj: Mapping[str, Any]) -> bool:
    spec_replicas = (obj.get("spec") or {}).get("replicas")
    status_replicas = (obj.get("status") or {}).get("replicas")
    return any(isinstance(n, int) and n > 0 for n in (spec_replicas, status_replicas))
