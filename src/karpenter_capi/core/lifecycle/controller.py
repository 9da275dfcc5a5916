"""The NodeClaim lifecycle controller: from a created NodeClaim to a Ready node.

One controller over NodeClaims (waking also on Node events, mapped back by provider ID and by
the Node's ownerReference, and on the events of the resources the plugins name in
``karpenter_capi_launch_watches``, mapped by the plugin to the NodeClaims whose launch they
may have moved, which are then asked again at once instead of at their next poll) runs four
steps in order on one working copy, as upstream's
``nodeclaim.lifecycle`` does: launch, registration, initialization, liveness (see their
modules). Running them in one reconcile, and writing the NodeClaim once at the end, keeps the
condition list consistent: four controllers patching the same list would fight over it.

Before any of them, the ``karpenter.sh/termination`` finalizer is added, in its own write, so
that nothing is ever launched for a NodeClaim that could disappear without the termination
flow releasing its machine. A NodeClaim being deleted is left to termination.

A NodeClaim the model refuses (upstream's CRDs admit what ours refuse, and hand-made ones may
carry anything) is not worked on, and gets no finalizer from us: its ``Ready`` condition says
``False``/``InvalidNodeClaim``, naming each field and its bound, with a Warning Event and one
WARNING line each time that message changes. Its spec is immutable, so the fix is to delete it;
termination releases whatever machine it has from what can be read of it.

Writes: metadata (finalizer, labels, annotations) through the main resource and status through
the status subresource, each with the resourceVersion just read or written as precondition. A
``Conflict`` propagates and the driver retries with backoff against the fresh object; whatever a
provider already answered is remembered by the launch step, so nothing is launched twice.

A NodeClaim whose cached copy is still the very version this controller's last write patched
is not reconciled: the cache has not shown that write yet, and a reconcile from the copy would
write again what was just written (the finalizer, the launch's fields) over a resourceVersion
the server has moved past, a ``409`` for nothing. The write's own watch event brings the
NodeClaim back with the copy that shows it. Upstream waits for its cache instead
(``nodeclaim/lifecycle/controller.go: Reconcile`` sleeps 1 s after writing "so that we are able
to read our own writes"); waiting is not done in a reconcile here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from pydantic import ValidationError

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.meta import validation_problems
from karpenter_capi.core.api.nodeclaim import READINESS_CONDITIONS, NodeClaim
from karpenter_capi.core.api.parsed import ParsedObjects
from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.errors import ProviderError
from karpenter_capi.core.hookspecs import LaunchWatch
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.events import WARNING
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    Resource,
)
from karpenter_capi.core.lifecycle.conditions import READY, ConditionSet
from karpenter_capi.core.lifecycle.initialization import Initialization
from karpenter_capi.core.lifecycle.launch import Launch
from karpenter_capi.core.lifecycle.liveness import (
    DEFAULT_LAUNCH_TIMEOUT,
    DEFAULT_REGISTRATION_TIMEOUT,
    Liveness,
)
from karpenter_capi.core.lifecycle.metrics import LifecycleReporter
from karpenter_capi.core.lifecycle.nodes import nodeclaim_keys_for_node
from karpenter_capi.core.lifecycle.registration import Registration
from karpenter_capi.core.lifecycle.said import SaidOnce
from karpenter_capi.core.lifecycle.work import NodeClaimWork
from karpenter_capi.core.lifecycle.writes import Writes
from karpenter_capi.core.plugin_host import PluginError
from karpenter_capi.core.runtime.controller import (
    DONE,
    MANAGEMENT,
    WORKLOAD,
    ControllerContext,
    Key,
    Result,
    Watch,
)

NAME: Final = "nodeclaim.lifecycle"
DEFAULT_LAUNCH_POLL_INTERVAL: Final = 5.0
DEFAULT_RETRY_INITIAL: Final = 1.0
DEFAULT_RETRY_MAX: Final = 60.0
INVALID_REASON: Final = "InvalidNodeClaim"
INVALID_FIX: Final = (
    "A NodeClaim's spec cannot change: delete this NodeClaim (its instance, if any, is released)"
    " and correct the NodePool or manifest it came from"
)


def invalid_nodeclaim_message(raw: JsonObject) -> str | None:
    """What ``Ready`` says on a NodeClaim the model refuses (``None`` when it validates):
    each field with its bound, and how to fix it. ``explain`` shows the same words."""
    try:
        NodeClaim.model_validate(raw)
    except ValidationError as exc:
        return f"{'; '.join(validation_problems(exc))}. {INVALID_FIX}"
    return None


def _ready_or_deleting(raw: JsonObject) -> bool:
    if (raw.get("metadata") or {}).get("deletionTimestamp"):
        return True
    conditions = (raw.get("status") or {}).get("conditions") or []
    return any(c.get("type") == READY and c.get("status") == "True" for c in conditions)


def earliest(results: Iterable[Result]) -> Result:
    """The soonest requeue any step asked for (none if none did)."""
    delays = [r.requeue_after for r in results if r.requeue_after is not None]
    return Result(requeue_after=max(0.0, min(delays))) if delays else DONE


class NodeClaimLifecycleController:
    """Launch, registration, initialization and liveness of NodeClaims (``nodeclaim.lifecycle``).

    Timeouts and intervals are in seconds: ``launch_timeout`` from creation to ``Launched``,
    ``registration_timeout`` from ``Launched`` to ``Registered``, ``launch_poll_interval``
    between ``create`` calls while the provider has not bound an instance, and the retry
    backoff after a failed ``create`` (``retry_initial`` doubling up to ``retry_max``).
    """

    name = NAME
    primary = NODECLAIMS
    primary_cluster = WORKLOAD

    def __init__(
        self,
        ctx: ControllerContext,
        *,
        launch_timeout: float = DEFAULT_LAUNCH_TIMEOUT,
        registration_timeout: float = DEFAULT_REGISTRATION_TIMEOUT,
        launch_poll_interval: float = DEFAULT_LAUNCH_POLL_INTERVAL,
        retry_initial: float = DEFAULT_RETRY_INITIAL,
        retry_max: float = DEFAULT_RETRY_MAX,
    ) -> None:
        self._ctx = ctx
        self._writes = Writes(ctx, NAME)
        metrics = LifecycleReporter(ctx.metrics, NAME)
        self._launch = Launch(
            ctx,
            self._writes,
            metrics,
            poll_interval=launch_poll_interval,
            retry_initial=retry_initial,
            retry_max=retry_max,
        )
        self._said = SaidOnce()
        self._nodeclaims = ParsedObjects(NodeClaim)
        """Each NodeClaim validated once per resourceVersion, however often it is polled."""
        self._registration = Registration(ctx, self._writes, metrics, self._said)
        self._initialization = Initialization(ctx, self._writes, metrics, self._said)
        self._liveness = Liveness(
            ctx,
            self._writes,
            metrics,
            launch_timeout=launch_timeout,
            registration_timeout=registration_timeout,
        )
        self._launch_watches = self._wake_ups(launch_poll_interval)
        self._written_over: dict[Key, str] = {}
        """NodeClaim -> the resourceVersion this controller's last write patched."""

    def watches(self) -> Sequence[Watch]:
        return (Watch(NODES, self._nodeclaims_of_node, WORKLOAD), *self._launch_watches)

    def _wake_ups(self, poll_interval: float) -> list[Watch]:
        """The plugins' launch watches as watches of this controller (none if they fail)."""
        try:
            found = self._ctx.plugins.launch_watches()
        except (PluginError, ProviderError) as exc:
            self._ctx.log.warning(
                "launches will be polled every %gs only: the plugins' launch watches are "
                "unavailable: %s",
                poll_interval,
                exc,
            )
            return []
        watches = []
        for plugin, watch in found:
            if watch.cluster not in (WORKLOAD, MANAGEMENT):
                self._ctx.log.warning(
                    "plugin %s: ignoring its launch watch of %s in unknown cluster %r",
                    plugin,
                    watch.resource.group_resource,
                    watch.cluster,
                )
                continue
            watches.append(Watch(watch.resource, self._waker(watch), watch.cluster))
        return watches

    def _waker(self, watch: LaunchWatch) -> Callable[[JsonObject], list[Key]]:
        def to_keys(obj: JsonObject) -> list[Key]:
            names = [name for name in watch.nodeclaims(obj) if isinstance(name, str) and name]
            for name in names:
                self._launch.wake(name)
            return names

        return to_keys

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return ((NODEPOOLS, WORKLOAD), (CLUSTER_API_NODE_CLASSES, WORKLOAD))

    def recovered(self) -> list[Key]:
        """An API server this controller reads answers again (the manager calls this): every
        NodeClaim not yet Ready is reconciled now, and launches that failed for want of the
        server are retried without waiting out their backoff."""
        self._launch.recover()
        store = self._ctx.caches.store(NODECLAIMS, WORKLOAD)
        return [key for key, raw in store.snapshot().items.items() if not _ready_or_deleting(raw)]

    def _nodeclaims_of_node(self, node: JsonObject) -> list[Key]:
        return nodeclaim_keys_for_node(self._ctx.caches, node)

    def reconcile(self, key: Key) -> Result:
        raw = self._ctx.caches.store(NODECLAIMS, WORKLOAD).get(key)
        if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
            self._launch.forget(key)
            self._said.forget(key)
            self._nodeclaims.forget(key)
            self._written_over.pop(key, None)
            return DONE
        version = raw["metadata"].get("resourceVersion")
        if version and self._written_over.get(key) == version:
            return DONE  # our last write is not in the cache yet: its watch event brings it
        try:
            model = self._nodeclaims.parse(raw)
        except ValidationError:
            self._launch.forget(key)
            self._mark_invalid(key, raw, invalid_nodeclaim_message(raw) or "")
            return DONE
        try:
            return self._reconcile(raw, model)
        except NotFound:
            # Deleted while we worked on it; nothing left to do.
            self._launch.forget(key)
            return DONE

    def _mark_invalid(self, key: Key, raw: JsonObject, message: str) -> None:
        """``Ready=False`` saying ``message``; the Event and the log line only when that is
        news (so once per change, and not again after a restart)."""
        meta = raw.get("metadata") or {}
        generation, created = meta.get("generation"), meta.get("creationTimestamp")
        conditions = ConditionSet(
            (raw.get("status") or {}).get("conditions") or [],
            now=self._ctx.clock.now(),
            generation=int(generation) if generation is not None else None,
            created=parse_timestamp(str(created)) if created else None,
            dependents=[str(c) for c in READINESS_CONDITIONS],
        )
        if not conditions.set_false(READY, INVALID_REASON, message):
            return
        self._writes.patch(
            NODECLAIMS,
            raw,
            {
                "metadata": {"resourceVersion": raw["metadata"].get("resourceVersion")},
                "status": {"conditions": conditions.to_json()},
            },
            subresource="status",
        )
        self._ctx.log.warning("nodeclaim %s is invalid, not launching it: %s", key, message)
        self._writes.event(raw, WARNING, INVALID_REASON, message)

    def _reconcile(self, raw: JsonObject, model: NodeClaim) -> Result:
        read = raw
        raw = self._ensure_finalizer(raw)
        if raw is not read:
            self._wrote_over(read, raw)
        work = NodeClaimWork.start(raw, model, self._ctx.clock.now())
        results = []
        for step in (self._launch, self._registration, self._initialization, self._liveness):
            results.append(step.reconcile(work))
            if work.deleted:
                return DONE
        self._write_back(work, read)
        return earliest(results)

    def _wrote_over(self, read: JsonObject, written: JsonObject) -> None:
        """A write over ``read`` landed as ``written``: until the cache moves past ``read``, it
        lags. Not when the write changed nothing the server keeps (same resourceVersion): no
        watch event would come to bring the NodeClaim back."""
        if self._writes.dry_run:  # a dry run's cache never shows its writes
            return
        version = str(read["metadata"].get("resourceVersion") or "")
        if version and (written.get("metadata") or {}).get("resourceVersion") != version:
            self._written_over[str(read["metadata"]["name"])] = version

    def _ensure_finalizer(self, raw: JsonObject) -> JsonObject:
        meta = raw.get("metadata") or {}
        finalizers: list[Any] = list(meta.get("finalizers") or [])
        if wellknown.FINALIZER_TERMINATION in finalizers:
            return raw
        return self._writes.patch(
            NODECLAIMS,
            raw,
            {
                "metadata": {
                    "finalizers": [*finalizers, wellknown.FINALIZER_TERMINATION],
                    "resourceVersion": meta.get("resourceVersion"),
                }
            },
        )

    def _write_back(self, work: NodeClaimWork, read: JsonObject) -> None:
        """Write what the steps changed (``read``: the copy the reconcile started from)."""
        metadata = work.metadata_patch()
        if metadata:
            metadata["resourceVersion"] = work.raw["metadata"].get("resourceVersion")
            work.raw = self._writes.patch(NODECLAIMS, work.raw, {"metadata": metadata})
            self._wrote_over(read, work.raw)
        status = work.status_patch()
        if status:
            written = self._writes.patch(
                NODECLAIMS,
                work.raw,
                {
                    "metadata": {"resourceVersion": work.raw["metadata"].get("resourceVersion")},
                    "status": status,
                },
                subresource="status",
            )
            self._wrote_over(read, written)
