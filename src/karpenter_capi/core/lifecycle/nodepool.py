"""The NodePool's ``Ready`` condition: can this pool be used at all, and if not, why?

A NodePool pointing at a NodeClass that does not exist, is not ready, or is not a kind any
enabled plugin serves, or one that fails upstream's runtime validation (see
``core/api/runtime_validation.py``), provisions nothing. Without a condition the user only sees
pods stay pending. As upstream's NodePool readiness controller, this sets ``ValidationSucceeded``
and ``NodeClassReady`` and derives ``Ready`` from them (``NodeRegistrationHealthy`` is
informational, see ``health.py``), with a Warning Event when the pool stops being ready and a
Normal one when it recovers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from pydantic import ValidationError

from karpenter_capi.core.api.meta import validation_problems
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool, NodePoolConditionType
from karpenter_capi.core.api.runtime_validation import runtime_problems
from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.events import NORMAL, WARNING
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, NODEPOOLS, Resource
from karpenter_capi.core.lifecycle.conditions import ConditionSet
from karpenter_capi.core.lifecycle.writes import Writes
from karpenter_capi.core.runtime.controller import (
    DONE,
    WORKLOAD,
    ControllerContext,
    Key,
    Result,
    Watch,
)

NAME: Final = "nodepool.readiness"
VALIDATION: Final = str(NodePoolConditionType.VALIDATION_SUCCEEDED)
NODECLASS_READY: Final = str(NodePoolConditionType.NODE_CLASS_READY)
READY: Final = str(NodePoolConditionType.READY)


def _nodeclass_name(pool: JsonObject) -> str | None:
    template = (pool.get("spec") or {}).get("template") or {}
    ref = (template.get("spec") or {}).get("nodeClassRef") or {}
    name = ref.get("name")
    return str(name) if name else None


class NodePoolReadinessController:
    """Keeps every NodePool's ``ValidationSucceeded``, ``NodeClassReady`` and ``Ready``."""

    name = NAME
    primary = NODEPOOLS
    primary_cluster = WORKLOAD

    def __init__(self, ctx: ControllerContext) -> None:
        self._ctx = ctx
        self._writes = Writes(ctx, NAME)

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
            dependents=(VALIDATION, NODECLASS_READY),
            root=READY,
        )
        was_ready = conditions.is_true(READY)
        try:
            problems = runtime_problems(NodePool.model_validate(pool))
        except ValidationError as exc:
            problems = validation_problems(exc)
        if problems:
            conditions.set_false(VALIDATION, "ValidationFailed", "; ".join(problems))
        else:
            conditions.set_true(VALIDATION)
        self._judge_nodeclass(pool, conditions)
        if not conditions.changed:
            return DONE
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
        if was_ready and not ready:
            why = "; ".join(
                f"{kind}: {conditions.message(kind)}"
                for kind in (VALIDATION, NODECLASS_READY)
                if not conditions.is_true(kind)
            )
            self._writes.event(pool, WARNING, "NodePoolNotReady", why)
        elif ready and not was_ready:
            self._writes.event(pool, NORMAL, "NodePoolReady", "NodePool is ready")
        return DONE

    def _judge_nodeclass(self, pool: JsonObject, conditions: ConditionSet) -> None:
        template = (pool.get("spec") or {}).get("template") or {}
        ref = (template.get("spec") or {}).get("nodeClassRef") or {}
        group, kind, name = ref.get("group"), ref.get("kind"), ref.get("name")
        if (group, kind) != (CLUSTER_API_NODE_CLASSES.group, CLUSTER_API_NODE_CLASSES.kind):
            conditions.set_false(
                NODECLASS_READY,
                "NodeClassNotSupported",
                f"nodeClassRef {group}/{kind} is not a kind this controller serves",
            )
            return
        nodeclass = self._ctx.caches.store(CLUSTER_API_NODE_CLASSES, WORKLOAD).get(str(name))
        if nodeclass is None:
            conditions.set_false(NODECLASS_READY, "NodeClassNotFound", f"{kind} {name} not found")
            return
        try:
            ClusterAPINodeClass.model_validate(nodeclass)
        except ValidationError as exc:
            # The provisioner cannot read it either (nor can a plugin judge it): say so here,
            # or the pool looks ready while it provisions nothing.
            conditions.set_false(
                NODECLASS_READY,
                "NodeClassInvalid",
                f"{kind} {name}: {'; '.join(validation_problems(exc))}",
            )
            return
        for condition in (nodeclass.get("status") or {}).get("conditions") or []:
            if condition.get("type") != "Ready":
                continue
            status = condition.get("status")
            if status == "True":
                conditions.set_true(NODECLASS_READY)
            elif status == "False":
                conditions.set_false(
                    NODECLASS_READY,
                    "NodeClassNotReady",
                    f"{kind} {name}: {condition.get('message') or condition.get('reason')}",
                )
            else:
                conditions.set_unknown(
                    NODECLASS_READY, "NodeClassReadinessUnknown", f"{kind} {name} is not judged yet"
                )
            return
        # A NodeClass no plugin has judged yet: usable, as the provisioner treats it.
        conditions.set_true(NODECLASS_READY)
