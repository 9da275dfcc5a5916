"""The ClusterAPINodeClass ``Ready`` condition and the Events that explain it.

A NodeClass whose selector matches nothing, or only resources that cannot be used, would
otherwise fail silently: pods stay pending and nobody says why. So the inventory's verdict is
written where users look (``kubectl get capinc`` shows Ready, ``kubectl describe`` the message
and the Events):

- ``Ready=False``, reason ``NoScalableResources``: the selector matches no opted-in
  MachineDeployment, MachineSet or MachinePool;
- ``Ready=False``, reason ``NoUsableScalableResources``: it matches some, none is usable; the
  message lists why, one line per resource;
- ``Ready=False``, reason ``InvalidConfiguration``: the selector or an overhead setting is
  malformed;
- ``Ready=False``, reason ``ManagementClusterUnreachable`` (connection refused, timeouts, 5xx,
  ``429 storage is (re)initializing``, throttling) or ``ManagementClusterAccessDenied`` (401,
  403): the Cluster API objects could not be read at all. The message says what the server
  answered, without the request's details (URLs, ports, object addresses), so it stays the same
  while the outage lasts and the status is written once, not once per round. An outage
  (``plugin_api.kube.unreachable``) is one sentence whatever its answers: a real one goes from
  refused to timed out to a restarted server's 429 "storage is (re)initializing", and a message
  naming each would flip the condition and repeat the Events;
- ``Ready=True``, reason ``Ready``: at least one resource is usable; the message counts them and
  lists the ones left out and the caveats (estimated prices, unreadable templates, a native
  plugin that could not describe a template, a failure domain where the cloud does not sell
  the type, malformed kubelet settings in a bootstrap config; the last three as Warning
  Events).

The inventory is rebuilt at every provisioning round, so writes must be rare and Events must not
repeat: the status is written only when the condition changes (``lastTransitionTime`` moves
only when its status does, as ``metav1.Condition`` requires), and an Event is recorded for a
problem only when it is not already listed in the stored condition. That makes Events "once per
appearance" without any memory in the process, so a restart does not repeat them either.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Final

from karpenter_capi.plugin_api import PluginContext, ProviderError
from karpenter_capi.plugin_api.karpenter import NodeClass, format_timestamp
from karpenter_capi.plugin_api.kube import (
    CLUSTER_API_NODE_CLASSES,
    NORMAL,
    WARNING,
    ApiError,
    Conflict,
    EventRecorder,
    NotFound,
    unreachable,
)
from karpenter_capi.plugins.generic_capi.inventory import (
    REASON_OFFERING_NOT_AVAILABLE,
    REASON_PRICE_ESTIMATED,
    REASON_TEMPLATE_NOT_DESCRIBED,
    Inventory,
    ResourceProblem,
    raw_nodeclass,
)
from karpenter_capi.plugins.generic_capi.selection import INFORMATIONAL_REASONS
from karpenter_capi.plugins.generic_capi.sources import REASON_INVALID_KUBELET_CONFIG

log = logging.getLogger(__name__)

READY: Final = "Ready"
REASON_READY: Final = "Ready"
REASON_NO_SCALABLE_RESOURCES: Final = "NoScalableResources"
REASON_NO_USABLE_SCALABLE_RESOURCES: Final = "NoUsableScalableResources"
REASON_INVALID_CONFIGURATION: Final = "InvalidConfiguration"
REASON_MANAGEMENT_CLUSTER_UNREACHABLE: Final = "ManagementClusterUnreachable"
REASON_MANAGEMENT_CLUSTER_ACCESS_DENIED: Final = "ManagementClusterAccessDenied"

_MAX_MESSAGE: Final = 32768  # metav1.Condition's limit
_NOTHING_SELECTED: Final = (
    "spec.scalableResourceSelector matches no MachineDeployment, MachineSet or MachinePool "
    "labelled node.cluster.x-k8s.io/karpenter-member"
)


def _lines(title: str, items: list[ResourceProblem]) -> list[str]:
    return [title, *(f"- {item}" for item in items)] if items else []


def _truncate(message: str) -> str:
    if len(message) <= _MAX_MESSAGE:
        return message
    cut = message[: _MAX_MESSAGE - 20].rsplit("\n", 1)[0]
    return f"{cut}\n- (truncated)"


class ManagementClusterError(ProviderError):
    """The management cluster could not be read: a transient failure (a launch waiting on it
    is retried, not given up), worded the same however the request failed."""


def management_cluster_error(exc: ApiError) -> Inventory:
    """The inventory of a NodeClass whose Cluster API objects could not be read: ``exc`` came
    from the management cluster (or from reaching it)."""
    answer = f"{exc.code} {exc.reason}"
    if exc.code in (401, 403):
        return Inventory(
            management_error=(
                REASON_MANAGEMENT_CLUSTER_ACCESS_DENIED,
                "the management cluster refused the controller's credentials "
                f"({answer}): check the management kubeconfig or token and its RBAC",
            )
        )
    what = "cannot be reached" if unreachable(exc) else f"answers with errors ({answer})"
    return Inventory(
        management_error=(
            REASON_MANAGEMENT_CLUSTER_UNREACHABLE,
            f"the management cluster {what}: no Cluster API object can be read, "
            "so nothing is launched and nothing is deleted until it answers again",
        )
    )


def ready_condition(inventory: Inventory) -> tuple[str, str, str]:
    """``(status, reason, message)`` of the Ready condition for ``inventory``."""
    if inventory.management_error is not None:
        reason, message = inventory.management_error
        return "False", reason, message
    if inventory.error is not None:
        return "False", REASON_INVALID_CONFIGURATION, _truncate(inventory.error)
    if not inventory.instance_types:
        if not inventory.problems:
            return "False", REASON_NO_SCALABLE_RESOURCES, _NOTHING_SELECTED
        lines = _lines(
            f"none of the {inventory.selected} selected scalable resources is usable:",
            inventory.problems,
        )
        return "False", REASON_NO_USABLE_SCALABLE_RESOURCES, _truncate("\n".join(lines))
    types = len(inventory.instance_types)
    summary = (
        f"{len(inventory.resources)} of {inventory.selected} selected scalable resources make "
        f"{types} instance type{'s' if types != 1 else ''}"
    )
    lines = [
        summary,
        *_lines("left out:", inventory.problems),
        *_lines("notes:", inventory.notices),
    ]
    return "True", REASON_READY, _truncate("\n".join(lines))


# Notices about a native plugin (capa, capz) that could not describe a template, a failure
# domain where the cloud does not sell the type, or a bootstrap config whose kubelet settings
# the kubelet would refuse: the resource is usable on paper but will not launch (or run) as
# configured, which a user must fix, so they are Warnings.
_WARNING_NOTICES: Final = frozenset(
    {REASON_TEMPLATE_NOT_DESCRIBED, REASON_OFFERING_NOT_AVAILABLE, REASON_INVALID_KUBELET_CONFIG}
)


def _event_type(item: ResourceProblem, usable: bool) -> str:
    if item.reason in _WARNING_NOTICES:
        return WARNING
    if usable or item.reason in INFORMATIONAL_REASONS or item.reason == REASON_PRICE_ESTIMATED:
        return NORMAL
    return WARNING


def _ready_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == READY:
            return condition
    return None


def _shows(obj: Mapping[str, Any], status: str, reason: str, message: str) -> bool:
    """Whether ``obj``'s Ready condition says this verdict, for its current generation."""
    previous = _ready_of(obj)
    generation = (obj.get("metadata") or {}).get("generation")
    return previous is not None and (
        previous.get("status"),
        previous.get("reason"),
        previous.get("message"),
        previous.get("observedGeneration"),
    ) == (status, reason, message, generation)


class WrittenVerdicts:
    """The verdict this process last wrote per NodeClass and the resourceVersion it wrote over,
    so that a caller's copy that does not show our write yet (the informer's, a moment behind)
    is known to lag it, and no request is sent to find that out. Per cluster
    (``PluginContext.state``); one entry per NodeClass name. Thread-safe."""

    _MAX: Final = 1024

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, tuple[str, tuple[str, str, str]]] = {}

    @classmethod
    def shared(cls, ctx: PluginContext) -> WrittenVerdicts:
        return ctx.state(cls, cls)

    def wrote(self, name: str, over: str, verdict: tuple[str, str, str]) -> None:
        with self._lock:
            if len(self._by_name) >= self._MAX:
                self._by_name.clear()  # NodeClasses come and go: keep it bounded
            self._by_name[name] = (over, verdict)

    def lags(self, name: str, copy_version: str, verdict: tuple[str, str, str]) -> bool:
        """Whether a copy at ``copy_version`` is the very version we wrote ``verdict`` over."""
        with self._lock:
            return bool(copy_version) and self._by_name.get(name) == (copy_version, verdict)


def _version_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def update_nodeclass_status(
    ctx: PluginContext,
    nodeclass: NodeClass | Mapping[str, Any],
    result: Inventory,
    *,
    recorder: EventRecorder | None = None,
) -> bool:
    """Write the Ready condition for ``result`` and record an Event per new problem.

    Writes over the caller's copy of the NodeClass (the informer's) with its resourceVersion as
    a precondition, so a copy that shows another verdict costs the write alone; a copy that
    lags the API (a 409), or one without a resourceVersion, is read fresh from
    ``ctx.workload`` (where karpenter objects live) and written over once more. The write goes
    through the ``status`` subresource and only when the condition changes; returns True when
    it wrote. A concurrent write or a deleted NodeClass is not an error: the next round tries
    again. Conditions of other types are kept.
    """
    known = raw_nodeclass(nodeclass)
    name = str((known.get("metadata") or {}).get("name") or "")
    verdict = ready_condition(result)
    # Every round and every launch call judges the NodeClass. When the caller's copy (the
    # informer's) already shows the verdict, or is the very version this process wrote it
    # over (the informer has not delivered our write yet), there is nothing to write.
    if _shows(known, *verdict):
        return False
    written = WrittenVerdicts.shared(ctx)
    if written.lags(name, _version_of(known), verdict):
        return False
    live: Mapping[str, Any] | None = known if _version_of(known) else None
    for _ in range(2):
        if live is None:
            try:
                live = ctx.workload.get(CLUSTER_API_NODE_CLASSES, name)
            except NotFound:
                return False
            if _shows(live, *verdict):
                return False
            fresh = True
        else:
            fresh = False
        try:
            _write(ctx, live, verdict)
        except Conflict:
            if fresh:
                return False
            live = None  # the caller's copy lags the API: read it and decide again
            continue
        except NotFound:
            return False
        written.wrote(name, _version_of(live), verdict)
        _announce(ctx, live, result, _ready_of(live), verdict, recorder=recorder)
        return True
    return False


def _write(ctx: PluginContext, live: Mapping[str, Any], verdict: tuple[str, str, str]) -> None:
    """Patch the Ready condition ``verdict`` over ``live`` (its resourceVersion a
    precondition), keeping its other conditions and, while the status is the same, the
    transition time."""
    status, reason, message = verdict
    previous = _ready_of(live)
    meta = live.get("metadata") or {}
    generation = meta.get("generation")
    since = (
        previous.get("lastTransitionTime")
        if previous is not None and previous.get("status") == status
        else None
    )
    condition: dict[str, Any] = {
        "type": READY,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or format_timestamp(ctx.clock.now()),
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    others = [
        c
        for c in (live.get("status") or {}).get("conditions") or []
        if isinstance(c, Mapping) and c.get("type") != READY
    ]
    ctx.workload.patch(
        CLUSTER_API_NODE_CLASSES,
        str(meta.get("name") or ""),
        {
            "metadata": {"resourceVersion": meta.get("resourceVersion")},
            "status": {"conditions": [*others, condition]},
        },
        subresource="status",
    )


def _announce(
    ctx: PluginContext,
    live: Mapping[str, Any],
    result: Inventory,
    previous: Mapping[str, Any] | None,
    verdict: tuple[str, str, str],
    *,
    recorder: EventRecorder | None,
) -> None:
    """Events (and log lines) for what the stored condition did not already say."""
    status, reason, message = verdict
    recorder = recorder or EventRecorder(ctx.workload, ctx.clock)
    said = str(previous.get("message") or "") if previous is not None else ""
    on_resource: EventRecorder | None = None
    name = (live.get("metadata") or {}).get("name")
    for item, is_notice in (
        *((p, False) for p in result.problems),
        *((n, True) for n in result.notices),
    ):
        line = f"- {item}"
        if line in said:
            continue
        event_type = _event_type(item, is_notice)
        level = logging.INFO if event_type == NORMAL else logging.WARNING
        ctx.logger.log(level, "ClusterAPINodeClass %s: %s", name, item)
        recorder.record(live, event_type, item.reason, str(item))
        involved = item.involved()
        if not is_notice and event_type == WARNING and involved is not None:
            # Also where `kubectl describe machinedeployment` shows it: in the management
            # cluster, the resource's namespace (its RBAC grants Events for this).
            on_resource = on_resource or EventRecorder(ctx.management, ctx.clock)
            on_resource.record(
                involved,
                WARNING,
                item.reason,
                f"left out of {CLUSTER_API_NODE_CLASSES.kind} {name}: {item.message}",
            )
            for elsewhere in item.also:
                on_resource.record(
                    elsewhere,
                    WARNING,
                    item.reason,
                    f"left out of {CLUSTER_API_NODE_CLASSES.kind} {name}: {item}",
                )
    changed_verdict = previous is None or (previous.get("status"), previous.get("reason")) != (
        status,
        reason,
    )
    if status == "False" and changed_verdict and not result.problems:
        ctx.logger.warning("ClusterAPINodeClass %s is not ready: %s", name, message)
        recorder.record(live, WARNING, reason, message)
    elif changed_verdict:
        log.debug("ClusterAPINodeClass %s: Ready=%s (%s)", name, status, reason)
