"""The NodePool's ``Ready`` condition: can this pool be used at all, and if not, why?

A NodePool pointing at a NodeClass that does not exist, is not ready, or is not a kind any
enabled plugin serves, or one that fails upstream's runtime validation (see
``core/api/runtime_validation.py``), provisions nothing. Without a condition the user only sees
pods stay pending. As upstream's NodePool readiness controller, this sets ``ValidationSucceeded``
and ``NodeClassReady`` and derives ``Ready`` from them (``NodeRegistrationHealthy`` is
informational, see ``health.py``), with a Warning Event when the pool stops being ready and a
Normal one when it recovers.

More things make a NodePool useless without anything being invalid, and are said here too:
requirements no instance type of its NodeClass meets (a typo in an instance type, a zone or an
architecture nothing offers) or a ``minValues`` all of them together cannot meet,
``InstanceTypesSatisfiable=False``, which makes it not ready (upstream launches nothing for
either); an ``expireAfter`` shorter than a node may take to register, which upstream honours and
so does this, but which replaces every node as soon as it comes up: a Warning Event, once; and
limits that leave room for no node, or that are beyond what Kubernetes counts (read as no limit):
an Event once per value, the pool staying ready, since a limit of 0 is how upstream users pause
a NodePool on purpose.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any, Final

from pydantic import ValidationError

from karpenter_capi.core.api.duration import format_duration
from karpenter_capi.core.api.meta import validation_problems
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool, NodePoolConditionType
from karpenter_capi.core.api.runtime_validation import runtime_problems
from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.errors import ProviderError
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.kube.events import NORMAL, WARNING
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, NODEPOOLS, Resource
from karpenter_capi.core.lifecycle.conditions import ConditionSet
from karpenter_capi.core.lifecycle.liveness import DEFAULT_REGISTRATION_TIMEOUT
from karpenter_capi.core.lifecycle.writes import Writes
from karpenter_capi.core.plugin_host import PluginError
from karpenter_capi.core.runtime.controller import (
    DONE,
    WORKLOAD,
    ControllerContext,
    Key,
    Result,
    Watch,
)
from karpenter_capi.core.scheduling.nofit import (
    min_values_reason,
    no_room_reason,
    satisfying,
    unsatisfiable_reason,
)
from karpenter_capi.core.values.requirements import Requirements
from karpenter_capi.core.values.resources import ResourceList, ResourceListError

NAME: Final = "nodepool.readiness"
VALIDATION: Final = str(NodePoolConditionType.VALIDATION_SUCCEEDED)
NODECLASS_READY: Final = str(NodePoolConditionType.NODE_CLASS_READY)
READY: Final = str(NodePoolConditionType.READY)
SATISFIABLE: Final = "InstanceTypesSatisfiable"
RECHECK: Final = 60.0
SHORT_EXPIRY: Final = timedelta(seconds=DEFAULT_REGISTRATION_TIMEOUT)
"""An ``expireAfter`` below this may expire a node before it has even registered."""
NO_ROOM: Final = "NoNodeWithinLimits"
_INT64_MAX: Final = 2**63 - 1


def _nodeclass_name(pool: JsonObject) -> str | None:
    template = (pool.get("spec") or {}).get("template") or {}
    ref = (template.get("spec") or {}).get("nodeClassRef") or {}
    name = ref.get("name")
    return str(name) if name else None


def _requirements(pool: JsonObject) -> Requirements:
    """What every node of ``pool`` must meet: its requirements and its template labels."""
    template = (pool.get("spec") or {}).get("template") or {}
    return Requirements.from_dicts((template.get("spec") or {}).get("requirements") or []).merged(
        Requirements.from_labels((template.get("metadata") or {}).get("labels") or {})
    )


def _instance_types_refusal(
    pool: JsonObject, types: Sequence[InstanceType]
) -> tuple[str, str] | None:
    """``InstanceTypesSatisfiable``'s reason and message when it is False, else ``None``."""
    if not types:
        return None
    requirements = _requirements(pool)
    where = f"{CLUSTER_API_NODE_CLASSES.kind} {_nodeclass_name(pool)}"
    why = unsatisfiable_reason(types, requirements)
    if why is not None:
        return (
            "NoInstanceTypeMeetsRequirements",
            f"{why}; change the requirement, or select scalable resources that offer it in {where}",
        )
    why = min_values_reason(types, requirements)
    if why is not None:
        return (
            "MinValuesNotMet",
            f"{why} among the instance types of {where} that meet the requirements; lower "
            "minValues, or select more scalable resources",
        )
    return None


def instance_types_problem(pool: JsonObject, types: Sequence[InstanceType]) -> str | None:
    """Why none of its NodeClass's ``types`` can ever make a node of ``pool`` (its requirements
    and template labels, or a ``minValues`` they all together cannot meet), naming the
    requirement and what to change; ``None`` if one can."""
    refusal = _instance_types_refusal(pool, types)
    return None if refusal is None else refusal[1]


def limits_warnings(
    pool: JsonObject, model: NodePool, types: Sequence[InstanceType]
) -> list[tuple[str, str, str]]:
    """What to tell about ``pool``'s limits, as (Event type, reason, message): a limit beyond
    what Kubernetes counts, read as no limit; and limits under which no node of its instance
    types fits (``types``, empty when not judged). Neither makes the pool unready: upstream
    users write ``cpu: 0`` to pause a NodePool, so a zero limit is said as Normal, and a
    non-zero one under the smallest node, almost always a unit slip, as a Warning."""
    written = model.spec.limits
    try:
        limits = ResourceList.parse(written)
    except ResourceListError:
        return []  # what the provisioner cannot read, it says on the NodePool
    said = [
        (
            WARNING,
            "LimitBeyondInt64",
            f"limits.{name} {written[name]} is beyond what Kubernetes counts "
            f"(int64): treated as no limit on {name}; remove it, or write the bound meant",
        )
        for name in sorted(limits)
        if limits.value(name) >= _INT64_MAX
    ]
    if model.is_static:
        return said  # limits.nodes caps its replicas, which the static controllers say
    why = no_room_reason(limits, satisfying(types, _requirements(pool)))
    if why is None:
        return said
    if any(limits.milli(name) == 0 for name in limits):
        return [
            *said,
            (
                NORMAL,
                NO_ROOM,
                f"{why}; nothing is launched from this NodePool: a limit of 0 is how a "
                "NodePool is paused, raise it to launch again",
            ),
        ]
    return [
        *said,
        (
            WARNING,
            NO_ROOM,
            f"{why}; nothing is launched from this NodePool until the limit is raised to at "
            "least one node's size (limits cap the total of all its nodes)",
        ),
    ]


def short_expiry_warning(model: NodePool) -> str | None:
    """What an ``expireAfter`` shorter than a registration may take means, or ``None``."""
    expire_after = model.spec.template.spec.expire_after
    if expire_after.value is None or expire_after.value >= SHORT_EXPIRY:
        return None
    return (
        f"expireAfter {expire_after} is shorter than a node may take to register "
        f"({format_duration(SHORT_EXPIRY)}): every node of this NodePool is replaced as soon "
        "as it comes up, and its pods with it; honoured as written, raise it unless that "
        "churn is intended"
    )


class NodePoolReadinessController:
    """Keeps every NodePool's ``ValidationSucceeded``, ``NodeClassReady`` and ``Ready``."""

    name = NAME
    primary = NODEPOOLS
    primary_cluster = WORKLOAD

    def __init__(self, ctx: ControllerContext) -> None:
        self._ctx = ctx
        self._writes = Writes(ctx, NAME)
        # NodePool uid -> the expireAfter last warned about: one Event per value, not per round.
        self._warned_expiry: dict[str, str] = {}
        # NodePool uid -> the limits messages said: each said once, again after it went away.
        self._warned_limits: dict[str, set[str]] = {}
        # NodePool uid -> (what the last satisfiable judgment depended on, when it was made).
        self._judged: dict[str, tuple[tuple[Any, ...], float]] = {}

    def watches(self) -> Sequence[Watch]:
        return [Watch(CLUSTER_API_NODE_CLASSES, self._pools_of)]

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return [(NODEPOOLS, WORKLOAD), (CLUSTER_API_NODE_CLASSES, WORKLOAD)]

    def _pools_of(self, nodeclass: JsonObject) -> Iterable[Key]:
        name = (nodeclass.get("metadata") or {}).get("name")
        pools = self._ctx.caches.store(NODEPOOLS, WORKLOAD).list()
        return [str(p["metadata"]["name"]) for p in pools if _nodeclass_name(p) == name]

    def reconcile(self, key: Key) -> Result:
        pool = self._ctx.caches.store(NODEPOOLS, WORKLOAD).get(key)
        if pool is None or (pool.get("metadata") or {}).get("deletionTimestamp"):
            return DONE
        meta = pool["metadata"]
        created = meta.get("creationTimestamp")
        generation = meta.get("generation")
        conditions = ConditionSet(
            (pool.get("status") or {}).get("conditions") or [],
            now=self._ctx.clock.now(),
            generation=int(generation) if generation is not None else None,
            created=parse_timestamp(str(created)) if created else None,
            dependents=(VALIDATION, NODECLASS_READY, SATISFIABLE),
            root=READY,
        )
        was_ready = conditions.is_true(READY)
        # Said when it stops being ready and when first judged not ready (a new bad pool).
        was_false = conditions.status(READY) == "False"
        model: NodePool | None = None
        try:
            model = NodePool.model_validate(pool)
            problems = runtime_problems(model)
        except ValidationError as exc:
            problems = validation_problems(exc)
        if problems:
            conditions.set_false(VALIDATION, "ValidationFailed", "; ".join(problems))
        else:
            conditions.set_true(VALIDATION)
        nodeclass = self._judge_nodeclass(pool, conditions)
        types: Sequence[InstanceType] | None = None
        if model is not None and nodeclass is not None and not problems:
            # Judged on this spec and NodeClass lately: Satisfiable stands as it is.
            if not self._judged_lately(pool, conditions):
                types = self._judge_instance_types(pool, model, nodeclass, conditions)
                self._mark_judged(pool, conditions)
        else:
            # Not judged until the pool and its NodeClass can be used; Ready says why not.
            conditions.set_unknown(
                SATISFIABLE, "AwaitingNodeClass", "judged once the NodePool and its NodeClass are"
            )
        if model is not None:
            self._warn_short_expiry(pool, model)
            self._warn_limits(pool, model, types)
        # Offerings change with the Cluster API objects, which this does not watch: a pool
        # nothing satisfies is looked at again a minute on.
        settled = (
            Result(requeue_after=RECHECK) if conditions.status(SATISFIABLE) == "False" else DONE
        )
        if not conditions.changed:
            return settled
        self._writes.patch(
            NODEPOOLS,
            pool,
            {
                "metadata": {"resourceVersion": meta.get("resourceVersion")},
                "status": {"conditions": conditions.to_json()},
            },
            subresource="status",
        )
        ready = conditions.is_true(READY)
        if conditions.status(READY) == "False" and not was_false:
            why = "; ".join(
                f"{kind}: {conditions.message(kind)}"
                for kind in (VALIDATION, NODECLASS_READY, SATISFIABLE)
                if not conditions.is_true(kind)
                and not (kind == SATISFIABLE and conditions.status(kind) != "False")
            )
            self._writes.event(pool, WARNING, "NodePoolNotReady", why)
        elif ready and not was_ready:
            self._writes.event(pool, NORMAL, "NodePoolReady", "NodePool is ready")
        return settled

    def _judged_key(self, pool: JsonObject) -> tuple[Any, ...]:
        """What a judgment of the instance types depends on that a watch shows: the pool's
        spec (its generation) and its NodeClass (its resourceVersion, which changes with the
        verdict the plugin writes there on every change of the inventory)."""
        template = (pool.get("spec") or {}).get("template") or {}
        ref = (template.get("spec") or {}).get("nodeClassRef") or {}
        nodeclass = self._ctx.caches.store(CLUSTER_API_NODE_CLASSES, WORKLOAD).get(
            str(ref.get("name"))
        )
        version = ((nodeclass or {}).get("metadata") or {}).get("resourceVersion")
        return (pool["metadata"].get("generation"), ref.get("name"), version)

    def _judged_lately(self, pool: JsonObject, conditions: ConditionSet) -> bool:
        """Whether the pool was found satisfiable on the same spec and NodeClass less than
        ``RECHECK`` ago. Each NodeClaim launched updates the pool's ``status.resources``, and
        judging again on each such update cost a whole inventory (four lists of the management
        cluster over HTTP) each time, 73 times in a 1,000-pod scale-up (issue 25)."""
        uid = str(pool["metadata"].get("uid") or pool["metadata"]["name"])
        judged = self._judged.get(uid)
        return (
            judged is not None
            and judged[0] == self._judged_key(pool)
            and self._ctx.clock.monotonic() - judged[1] < RECHECK
            and conditions.is_true(SATISFIABLE)
        )

    def _mark_judged(self, pool: JsonObject, conditions: ConditionSet) -> None:
        uid = str(pool["metadata"].get("uid") or pool["metadata"]["name"])
        if conditions.is_true(SATISFIABLE):
            self._judged[uid] = (self._judged_key(pool), self._ctx.clock.monotonic())
        else:
            self._judged.pop(uid, None)

    def _judge_instance_types(
        self,
        pool: JsonObject,
        model: NodePool,
        nodeclass: ClusterAPINodeClass,
        conditions: ConditionSet,
    ) -> Sequence[InstanceType] | None:
        """``InstanceTypesSatisfiable``: whether any instance type of the NodeClass meets the
        pool's requirements (and template labels, and minValues), naming the one that excludes
        them if not. Returns the NodeClass's instance types, ``None`` when they are not known."""
        try:
            types = self._ctx.plugins.instance_types(nodeclass, model, priced=False)
        except (ProviderError, PluginError, ApiError):
            return None  # the provisioner reports the inventory's error on the NodePool
        refusal = _instance_types_refusal(pool, types)
        if refusal is None:
            # With no type at all, NodeClassReady says why it offers nothing.
            conditions.set_true(SATISFIABLE)
            return types
        conditions.set_false(SATISFIABLE, *refusal)
        return types

    def _warn_short_expiry(self, pool: JsonObject, model: NodePool) -> None:
        uid = str(pool["metadata"].get("uid") or pool["metadata"]["name"])
        expire_after = model.spec.template.spec.expire_after
        if short_expiry_warning(model) is None:
            self._warned_expiry.pop(uid, None)
            return
        if self._warned_expiry.get(uid) == str(expire_after):
            return
        self._warned_expiry[uid] = str(expire_after)
        self._writes.event(pool, WARNING, "ExpireAfterTooShort", short_expiry_warning(model) or "")

    def _warn_limits(
        self, pool: JsonObject, model: NodePool, types: Sequence[InstanceType] | None
    ) -> None:
        """Each of ``limits_warnings`` as an Event, once until it stops being true; while the
        instance types are not known, what was said of them stands."""
        uid = str(pool["metadata"].get("uid") or pool["metadata"]["name"])
        warnings = limits_warnings(pool, model, types or ())
        said = self._warned_limits.get(uid, set())
        for event_type, reason, message in warnings:
            if message not in said:
                self._writes.event(pool, event_type, reason, message)
        now = {message for _, _, message in warnings}
        if types is None:
            now |= said
        if now:
            self._warned_limits[uid] = now
        else:
            self._warned_limits.pop(uid, None)

    def _judge_nodeclass(
        self, pool: JsonObject, conditions: ConditionSet
    ) -> ClusterAPINodeClass | None:
        """Sets ``NodeClassReady``; the NodeClass when it is ready (or not judged yet)."""
        template = (pool.get("spec") or {}).get("template") or {}
        ref = (template.get("spec") or {}).get("nodeClassRef") or {}
        group, kind, name = ref.get("group"), ref.get("kind"), ref.get("name")
        if (group, kind) != (CLUSTER_API_NODE_CLASSES.group, CLUSTER_API_NODE_CLASSES.kind):
            conditions.set_false(
                NODECLASS_READY,
                "NodeClassNotSupported",
                f"nodeClassRef {group}/{kind} is not a kind this controller serves",
            )
            return None
        nodeclass = self._ctx.caches.store(CLUSTER_API_NODE_CLASSES, WORKLOAD).get(str(name))
        if nodeclass is None:
            conditions.set_false(NODECLASS_READY, "NodeClassNotFound", f"{kind} {name} not found")
            return None
        try:
            model = ClusterAPINodeClass.model_validate(nodeclass)
        except ValidationError as exc:
            # The provisioner cannot read it either (nor can a plugin judge it): say so here,
            # or the pool looks ready while it provisions nothing.
            conditions.set_false(
                NODECLASS_READY,
                "NodeClassInvalid",
                f"{kind} {name}: {'; '.join(validation_problems(exc))}",
            )
            return None
        for condition in (nodeclass.get("status") or {}).get("conditions") or []:
            if condition.get("type") != "Ready":
                continue
            status = condition.get("status")
            if status == "True":
                conditions.set_true(NODECLASS_READY)
                return model
            if status == "False":
                conditions.set_false(
                    NODECLASS_READY,
                    "NodeClassNotReady",
                    f"{kind} {name}: {condition.get('message') or condition.get('reason')}",
                )
            else:
                conditions.set_unknown(
                    NODECLASS_READY, "NodeClassReadinessUnknown", f"{kind} {name} is not judged yet"
                )
            return None
        # A NodeClass no plugin has judged yet: usable, as the provisioner treats it.
        conditions.set_true(NODECLASS_READY)
        return model
