"""Launch: turn a NodeClaim into a request for a machine, and learn which machine it got.

Launch is asynchronous (design decision 3, "Launch never waits"). The first
``karpenter_capi_create`` records the provider's intent (a replica bump, a fleet request) and
usually returns without a provider ID; ``Launched`` then stays ``Unknown`` with reason ``Launching``
and the step polls by calling ``create`` again, which the hook contract requires to be idempotent:
the plugin recognises its own NodeClaim (by the annotations it asked us to record, or by name) and
answers with the provider ID once a machine is bound. ``Launched`` goes ``True`` when a result
carries one, and the provider ID, capacity, allocatable, image and the offering's labels are
recorded.

Failures split three ways, as upstream's launch does:

* ``InsufficientCapacityError`` and ``NodeClassNotReadyError`` delete the NodeClaim (with an
  Event saying why) so the provisioner simulates its pods again against what is available;
* everything else (a ``RetryableCreateError``, a plugin bug, an API error, a NodePool that
  cannot be read) keeps ``Launched`` ``Unknown`` with the reason and retries after 1 s,
  doubling up to 1 min; liveness deletes the NodeClaim if that goes on past the launch timeout.
  When the failure is an API server that cannot be reached (``core.kube.errors.unreachable``:
  refused, timed out, 5xx, ``429 storage is (re)initializing``, however a plugin wrapped it)
  the wait stops doubling at ``UNREACHABLE_RETRY_MAX`` (5 s), and ``recover`` (called when an
  informer hears the server answer again) ends it at once: pods waiting on an outage are served
  within seconds of its end. A ``Retry-After`` from the server is always a floor. The failure
  is logged once per change of message, not at every retry.

What was launched is also remembered in memory per NodeClaim uid, because the informer cache
may not show our own write yet on the next reconcile: without it a stale read would look like
"never launched" and, for a plugin that recognises its work only by annotation, launch twice.
The same memory holds the retry and poll schedule, so a reconcile triggered early (by our own
status write) does not call the provider again before its time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.meta import NodeClassReference, validation_problems
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.api.parsed import ParsedObjects
from karpenter_capi.core.errors import (
    InsufficientCapacityError,
    NodeClassNotReadyError,
    ProviderError,
    RetryableCreateError,
)
from karpenter_capi.core.hookspecs import LaunchResult
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.kube.backoff import UNREACHABLE_RETRY_MAX
from karpenter_capi.core.kube.errors import ApiError, retry_after, unreachable
from karpenter_capi.core.kube.events import WARNING
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, NODECLAIMS, NODEPOOLS
from karpenter_capi.core.lifecycle.metrics import LifecycleReporter
from karpenter_capi.core.lifecycle.work import NodeClaimWork
from karpenter_capi.core.lifecycle.writes import Writes
from karpenter_capi.core.observability.logs import ref
from karpenter_capi.core.plugin_host import PluginError
from karpenter_capi.core.runtime.controller import DONE, WORKLOAD, ControllerContext, Result
from karpenter_capi.core.scheduling.nofit import unsatisfiable_reason
from karpenter_capi.core.scheduling.solver_io import compatible_offerings
from karpenter_capi.core.values.requirements import RequirementError, Requirements

LAUNCHED: Final = str(NodeClaimConditionType.LAUNCHED)
REASON_LAUNCHING: Final = "Launching"
REASON_LAUNCH_FAILED: Final = "LaunchFailed"
_MAX_MESSAGE: Final = 300
_OFFERING_LABELS: Final = frozenset(
    {wellknown.LABEL_INSTANCE_TYPE, wellknown.LABEL_CAPACITY_TYPE, wellknown.LABEL_TOPOLOGY_ZONE}
)


class LaunchInputError(Exception):
    """The NodeClaim cannot be launched yet for a reason worth retrying (its NodePool)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class LaunchInputs:
    nodepool: NodePool
    nodeclass: ClusterAPINodeClass
    instance_types: list[InstanceType]
    under_way: list[InstanceType]
    """The same types with their unavailable offerings too: what a launch already under way
    may still be completing (its own waiting claims can be what made an offering full)."""
    impossible: str | None = None
    """Why no type could ever meet the requirements (a hand-made NodeClaim's, say), naming the
    requirement; ``None`` when some could, were its offerings available."""


INPUTS_REUSE: Final = 10.0
"""Seconds a launch under way reuses the inputs its last call resolved (``Launch._inputs``)."""


def _specs(ctx: ControllerContext, work: NodeClaimWork) -> tuple[str, ...] | None:
    """Which NodePool and NodeClass specs the inputs would be resolved from (uid and
    generation: their status changes with every launch and does not change the inputs)."""
    pool = ctx.caches.store(NODEPOOLS, WORKLOAD).get(work.nodepool) if work.nodepool else None
    name = work.model.spec.node_class_ref.name
    nodeclass = ctx.caches.store(CLUSTER_API_NODE_CLASSES, WORKLOAD).get(name)
    if pool is None or nodeclass is None:
        return None
    versions: list[str] = []
    for obj in (pool, nodeclass):
        meta = obj.get("metadata") or {}
        generation = meta.get("generation")
        if generation is None:
            return None  # no generation to tell a spec change from a status one
        versions += [str(meta.get("uid", "")), str(generation)]
    return tuple(versions)


def _truncate(message: str) -> str:
    return message if len(message) <= _MAX_MESSAGE else message[:_MAX_MESSAGE] + "..."


def claim_requirements(raw: Mapping[str, Any]) -> Requirements:
    return Requirements.from_dicts((raw.get("spec") or {}).get("requirements") or [])


def launchable_instance_types(
    instance_types: Sequence[InstanceType],
    requirements: Requirements,
    *,
    available_only: bool = True,
) -> list[InstanceType]:
    """The instance types a NodeClaim may become, cheapest first, each narrowed to the
    offerings its requirements allow (what ``karpenter_capi_create`` is promised).

    The NodeClaim's ``node.kubernetes.io/instance-type In [...]`` requirement already names
    the types the solver found big enough, so fit is not checked again here.
    """
    result = []
    for instance_type in instance_types:
        type_requirements = Requirements.from_value_sets(instance_type.requirements)
        if requirements.conflict_with(type_requirements) is not None:
            continue
        offerings = compatible_offerings(instance_type, requirements, available_only=available_only)
        if offerings:
            result.append(instance_type.with_offerings(offerings))
    result.sort(key=lambda it: (min(o.price for o in it.offerings), it.name))
    return result


def _nodepool_not_found(name: str | None) -> str:
    """What a NodeClaim made by hand (or outliving its NodePool) is told to fix."""
    label = wellknown.LABEL_NODEPOOL
    if not name:
        return (
            f"the NodeClaim has no {label} label: name the NodePool it belongs to in that "
            "label (a NodeClaim is launched with its NodePool's settings)"
        )
    return f"NodePool {name} (label {label}) not found: create it or name an existing NodePool"


@dataclass(frozen=True)
class LaunchModels:
    """The NodePools and NodeClasses launches read, each validated once per resourceVersion
    (a launch is polled every few seconds; they rarely change)."""

    nodepools: ParsedObjects[NodePool] = field(default_factory=lambda: ParsedObjects(NodePool))
    nodeclasses: ParsedObjects[ClusterAPINodeClass] = field(
        default_factory=lambda: ParsedObjects(ClusterAPINodeClass)
    )


def resolve_launch_inputs(
    ctx: ControllerContext, work: NodeClaimWork, parsed: LaunchModels | None = None
) -> LaunchInputs:
    """The NodePool, NodeClass and launchable instance types of a NodeClaim, from the caches.

    Like ``core.provisioning.inventory.resolve_nodepool``, but it keeps errors typed: a
    NodeClass that is missing, invalid or refused by its plugin raises
    ``NodeClassNotReadyError`` (the NodeClaim is given up), a NodePool problem
    ``LaunchInputError`` (retried), and the plugins' own errors propagate. ``parsed`` keeps
    the NodePool and NodeClass models between polls (else they are validated again).
    """
    parsed = parsed or LaunchModels()
    pool_name = work.nodepool
    raw_pool = ctx.caches.store(NODEPOOLS, WORKLOAD).get(pool_name) if pool_name else None
    if raw_pool is None:
        raise LaunchInputError("NodePoolNotFound", _nodepool_not_found(pool_name))
    try:
        nodepool = parsed.nodepools.parse(raw_pool)
    except ValidationError as exc:
        raise LaunchInputError(
            "NodePoolInvalid",
            f"invalid NodePool {pool_name}: {'; '.join(validation_problems(exc))}",
        ) from exc
    ref: NodeClassReference = work.model.spec.node_class_ref
    if (ref.group, ref.kind) != (CLUSTER_API_NODE_CLASSES.group, CLUSTER_API_NODE_CLASSES.kind):
        raise NodeClassNotReadyError(
            ref.name, f"nodeClassRef {ref.group}/{ref.kind} is not a kind this controller can read"
        )
    raw_class = ctx.caches.store(CLUSTER_API_NODE_CLASSES, WORKLOAD).get(ref.name)
    if raw_class is None:
        raise NodeClassNotReadyError(ref.name, f"{ref.kind} {ref.name} not found")
    try:
        nodeclass = parsed.nodeclasses.parse(raw_class)
    except ValidationError as exc:
        raise NodeClassNotReadyError(ref.name, "; ".join(validation_problems(exc))) from exc
    try:
        requirements = claim_requirements(work.raw)
    except RequirementError as exc:
        raise LaunchInputError("InvalidRequirements", str(exc)) from exc
    inventory = ctx.plugins.instance_types(nodeclass, nodepool)
    under_way = launchable_instance_types(inventory, requirements, available_only=False)
    return LaunchInputs(
        nodepool,
        nodeclass,
        launchable_instance_types(inventory, requirements),
        under_way,
        impossible=None if under_way else unsatisfiable_reason(inventory, requirements),
    )


@dataclass
class _Attempt:
    """What this process knows about one NodeClaim's launch (keyed by name, checked by uid)."""

    uid: str
    result: LaunchResult | None = None
    instance_type: InstanceType | None = None
    failures: int = 0
    next_at: float = 0.0
    """Clock-monotonic time before which the provider is not called again."""
    wakes: int = 0
    """Wake-ups so far (``Launch.wake``): one that comes during a call voids its poll delay."""
    unreachable: bool = False
    """The last failure was an API server out of reach: ``recover`` retries it at once."""
    logged: str = ""
    """The failure message last logged at WARNING (a repeat goes to DEBUG)."""
    said: bool = False
    """``launched nodeclaim`` logged: a retry after a lost conflict or a stale read says no more."""
    inputs: tuple[tuple[str, ...], float, LaunchInputs] | None = None
    """The inputs the last call resolved: for whose NodePool and NodeClass specs, and when."""


class Launch:
    """The launch step of the NodeClaim lifecycle controller."""

    def __init__(
        self,
        ctx: ControllerContext,
        writes: Writes,
        metrics: LifecycleReporter,
        *,
        poll_interval: float,
        retry_initial: float,
        retry_max: float,
    ) -> None:
        self._ctx = ctx
        self._writes = writes
        self._metrics = metrics
        self._poll_interval = poll_interval
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._lock = threading.Lock()
        self._attempts: dict[str, _Attempt] = {}
        self._kinds: dict[tuple[str, str], list[str]] | None = None
        self._parsed = LaunchModels()

    def forget(self, name: str) -> None:
        with self._lock:
            self._attempts.pop(name, None)

    def wake(self, name: str) -> None:
        """A plugin says the launch of ``name`` may have moved: call it again at its next
        reconcile instead of waiting for the poll (a failing launch keeps its backoff)."""
        with self._lock:
            attempt = self._attempts.get(name)
            if attempt is not None and attempt.failures == 0:
                attempt.wakes += 1
                attempt.next_at = 0.0

    def recover(self) -> list[str]:
        """An API server answers again: every launch that failed because it could not be
        reached is retried at its next reconcile. Returns their NodeClaims' names."""
        with self._lock:
            woken = [name for name, a in self._attempts.items() if a.failures and a.unreachable]
            for name in woken:
                self._attempts[name].next_at = 0.0
            return woken

    def _attempt(self, work: NodeClaimWork) -> _Attempt:
        with self._lock:
            attempt = self._attempts.get(work.name)
            if attempt is None or attempt.uid != work.uid:
                attempt = _Attempt(work.uid)
                self._attempts[work.name] = attempt
            return attempt

    def provider_label(self, ref: NodeClassReference) -> str:
        """The plugin that serves a NodeClass kind, for the provider label of call metrics."""
        if self._kinds is None:
            try:
                self._kinds = self._ctx.plugins.nodeclass_kinds()
            except PluginError:
                self._kinds = {}
        plugins = self._kinds.get((ref.group, ref.kind)) or ["unknown"]
        return plugins[0]

    def reconcile(self, work: NodeClaimWork) -> Result:
        if work.conditions.is_true(LAUNCHED):
            self.forget(work.name)
            return DONE
        attempt = self._attempt(work)
        if attempt.result is not None:
            # Our earlier result may not be visible in the cache yet: re-apply it first, so the
            # plugin sees its own annotations and nothing already known is lost.
            self._apply(work, attempt)
            if attempt.result.provider_id:
                return self._launched(work, attempt)
        wait = attempt.next_at - self._ctx.clock.monotonic()
        if wait > 0:
            return Result(requeue_after=wait)
        try:
            inputs = self._inputs(work, attempt)
            instance_types = inputs.instance_types
            under_way = attempt.result is not None or (
                work.conditions.reason(LAUNCHED) == REASON_LAUNCHING
            )
            if not instance_types and under_way:
                # The plugin is completing this launch; only it can say it has failed.
                instance_types = inputs.under_way
            if not instance_types:
                detail = f": {inputs.impossible}" if inputs.impossible else ""
                raise InsufficientCapacityError(
                    "no instance type allowed by the NodeClaim's requirements has an available "
                    f"offering{detail}"
                )
            if self._writes.dry_run:
                self._writes.would(
                    "launch NodeClaim %s as one of %s",
                    work.name,
                    ", ".join(it.name for it in instance_types),
                )
                return DONE
            provider = self.provider_label(work.model.spec.node_class_ref)
            wakes = attempt.wakes
            with self._metrics.provider_call("Create", provider):
                result = self._ctx.plugins.create(work.to_model(), instance_types, inputs.nodeclass)
        except InsufficientCapacityError as exc:
            return self._give_up(work, "InsufficientCapacityError", "insufficient_capacity", exc)
        except NodeClassNotReadyError as exc:
            return self._give_up(work, "NodeClassNotReady", "nodeclass_not_ready", exc)
        except RetryableCreateError as exc:
            delay = exc.retry_after.total_seconds() if exc.retry_after else None
            return self._retry(work, attempt, REASON_LAUNCH_FAILED, str(exc), delay, error=exc)
        except LaunchInputError as exc:
            return self._retry(work, attempt, exc.reason, exc.message, None, error=exc)
        except (ProviderError, PluginError, ApiError) as exc:
            return self._retry(work, attempt, REASON_LAUNCH_FAILED, str(exc), None, error=exc)
        attempt.result = result
        attempt.failures = 0
        attempt.unreachable = False
        attempt.logged = ""
        attempt.instance_type = next(
            (it for it in instance_types if it.name == result.instance_type),
            attempt.instance_type,
        )
        self._apply(work, attempt)
        if result.provider_id:
            return self._launched(work, attempt)
        where = f" in {result.zone}" if result.zone else ""
        work.conditions.set_unknown(
            LAUNCHED,
            REASON_LAUNCHING,
            f"waiting for the provider to bind a {result.instance_type} "
            f"{result.capacity_type} instance{where}",
        )
        if attempt.wakes == wakes:
            attempt.next_at = self._ctx.clock.monotonic() + self._poll_interval
        else:
            attempt.next_at = 0.0  # woken during the call: what woke it may be news to it
        return Result(requeue_after=self._poll_interval)

    def _inputs(self, work: NodeClaimWork, attempt: _Attempt) -> LaunchInputs:
        """The launch's inputs; a launch under way reuses those of its last call for
        ``INPUTS_REUSE`` seconds while the NodePool's and NodeClass's specs are unchanged.

        Between the call that chose a resource and the one that finds its Machine (one or two
        poll intervals), the plugin completes the launch from its intent and does not rank the
        types again; resolving them cost the plugin a fresh selection of the management
        cluster's scalable resources, four lists over a real API, for every call (issue 25).
        """
        now = self._ctx.clock.monotonic()
        specs = _specs(self._ctx, work)
        kept = attempt.inputs
        if (
            kept is not None
            and specs is not None
            and kept[0] == specs
            and now - kept[1] < INPUTS_REUSE
            and attempt.result is not None
            and not attempt.result.provider_id
        ):
            return kept[2]
        inputs = resolve_launch_inputs(self._ctx, work, self._parsed)
        attempt.inputs = None if specs is None else (specs, now, inputs)
        return inputs

    def _apply(self, work: NodeClaimWork, attempt: _Attempt) -> None:
        """Record what the provider said: labels, annotations, provider ID, shape, image."""
        result = attempt.result
        assert result is not None
        resolved = dict(result.labels)
        resolved[wellknown.LABEL_INSTANCE_TYPE] = result.instance_type
        resolved[wellknown.LABEL_CAPACITY_TYPE] = result.capacity_type
        if result.zone:
            resolved[wellknown.LABEL_TOPOLOGY_ZONE] = result.zone
        try:
            pinned = claim_requirements(work.raw).labels()
        except RequirementError:
            pinned = {}
        pinned.pop(wellknown.LABEL_HOSTNAME, None)
        # As upstream: what the user or the NodePool set wins over what the provider resolved;
        # but the offering is the latest result's (a plugin that fell back to another type or
        # zone after an earlier result was recorded must not leave the first one's labels), and
        # a provider ID settles every label: a plugin that lets the cloud choose (an EC2 Fleet)
        # answered with its likeliest offering before, and now knows the real one.
        settled = {
            key: value
            for key, value in resolved.items()
            if key not in pinned and (result.provider_id or key in _OFFERING_LABELS)
        }
        work.labels = {**resolved, **pinned, **work.labels, **settled}
        work.annotations = {**work.annotations, **result.annotations}
        capacity = result.capacity or (
            attempt.instance_type.capacity if attempt.instance_type else None
        )
        allocatable = result.allocatable or (
            attempt.instance_type.allocatable if attempt.instance_type else None
        )
        if capacity is not None:
            work.status["capacity"] = capacity.to_dict()
        if allocatable is not None:
            work.status["allocatable"] = allocatable.to_dict()
        if result.image_id:
            work.status["imageID"] = result.image_id
        if result.provider_id:
            work.status["providerID"] = result.provider_id

    def _launched(self, work: NodeClaimWork, attempt: _Attempt) -> Result:
        result = attempt.result
        assert result is not None
        if work.conditions.set_true(LAUNCHED) and not attempt.said:
            attempt.said = True
            self._ctx.log.info(
                "launched nodeclaim",
                extra={
                    "NodeClaim": ref(work.name),
                    "provider-id": result.provider_id,
                    "instance-type": result.instance_type,
                    "zone": result.zone or "",
                    "capacity-type": result.capacity_type,
                    "allocatable": work.status.get("allocatable") or {},
                },
            )
            self._metrics.launched(work.nodepool)
        return DONE

    def _retry(
        self,
        work: NodeClaimWork,
        attempt: _Attempt,
        reason: str,
        message: str,
        delay: float | None,
        *,
        error: Exception,
    ) -> Result:
        attempt.failures += 1
        attempt.unreachable = unreachable(error)
        if delay is None:
            doublings = min(attempt.failures - 1, 32)  # past the cap anyway; keeps it a float
            delay = min(self._retry_initial * 2**doublings, self._retry_max)
            if attempt.unreachable:
                # Asking a server that is not there again costs nothing, and it may be back.
                delay = min(delay, UNREACHABLE_RETRY_MAX)
        # A Retry-After from the API server (possibly wrapped by the plugin) is a floor.
        delay = max(delay, retry_after(error))
        attempt.next_at = self._ctx.clock.monotonic() + delay
        repeated = message == attempt.logged
        attempt.logged = message
        self._ctx.log.log(
            logging.DEBUG if repeated else logging.WARNING,
            "launching nodeclaim %s failed (attempt %d, retrying in %gs): %s",
            work.name,
            attempt.failures,
            delay,
            message,
        )
        work.conditions.set_unknown(LAUNCHED, reason, _truncate(message))
        return Result(requeue_after=delay)

    def _give_up(
        self, work: NodeClaimWork, event_reason: str, metric_reason: str, error: Exception
    ) -> Result:
        """Delete the NodeClaim so its pods are simulated again against what is left."""
        self._ctx.log.warning("launching nodeclaim %s failed, deleting it: %s", work.name, error)
        self._writes.event(
            work.raw, WARNING, event_reason, f"NodeClaim {work.name} event: {_truncate(str(error))}"
        )
        if self._writes.delete(NODECLAIMS, work.raw):
            self._metrics.disrupted(metric_reason, work.nodepool, work.capacity_type)
        self.forget(work.name)
        work.deleted = True
        return DONE
