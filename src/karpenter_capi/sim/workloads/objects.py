"""Pod helpers shared by the workload controllers: phase, readiness, node fit, expectations.

The Deployment, DaemonSet and kubelet stand-ins all ask the same questions of a pod (is it
active, is it Ready, since when) and of a node (would this pod template run there); answering
them once keeps the three consistent with each other and with kube's definitions
(``controller.FilterActivePods``, ``podutil.IsPodReady``, the DaemonSet controller's
``NodeShouldRunDaemonPod``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.core.clock import Clock, parse_timestamp
from karpenter_capi.core.kube.cache import Store, make_key
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.values.taints import Taint, TaintError
from karpenter_capi.sim.capi.objects import (
    controller_ref,
    is_deleting,
    labels_of,
    name_of,
    namespace_of,
    nested,
    uid_of,
)
from karpenter_capi.sim.workloads.tolerations import untolerated

TERMINAL_PHASES: Final = ("Succeeded", "Failed")


def _seconds(value: Any) -> float:
    """Epoch seconds of an RFC 3339 timestamp; 0 when absent or malformed."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return parse_timestamp(value).timestamp()
    except ValueError:
        return 0.0


def phase_of(pod: Mapping[str, Any]) -> str:
    status = pod.get("status")
    if type(status) is dict:  # the common case, without ``nested``'s checks at every step
        return str(status.get("phase") or "Pending")
    return str(nested(pod, "status", "phase") or "Pending")


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return phase_of(pod) in TERMINAL_PHASES


def is_active(pod: Mapping[str, Any]) -> bool:
    """``FilterActivePods``: neither finished nor being deleted (those are replaced)."""
    return not is_terminal(pod) and not is_deleting(pod)


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    status = obj.get("status")
    conditions = (
        status.get("conditions") if type(status) is dict else nested(obj, "status", "conditions")
    )
    if not isinstance(conditions, list):
        return None
    for entry in conditions:
        if (type(entry) is dict or isinstance(entry, Mapping)) and entry.get("type") == kind:
            return entry
    return None


def is_ready(pod: Mapping[str, Any]) -> bool:
    ready = condition(pod, "Ready")
    return ready is not None and ready.get("status") == "True"


def ready_since(pod: Mapping[str, Any]) -> float:
    """When the pod's Ready condition last turned True (epoch seconds; 0 when unknown)."""
    return _seconds((condition(pod, "Ready") or {}).get("lastTransitionTime"))


def created_seconds(obj: Mapping[str, Any]) -> float:
    return _seconds(nested(obj, "metadata", "creationTimestamp"))


def controller_key_of(obj: Mapping[str, Any], kind: str, group: str = "apps") -> str | None:
    """``namespace/name`` of the object's controller when it is a ``kind`` of ``group``."""
    ref = controller_ref(obj)
    if ref is None or ref.get("kind") != kind:
        return None
    if str(ref.get("apiVersion") or "").partition("/")[0] != group:
        return None
    return make_key(str(ref.get("name") or ""), namespace_of(obj) or None)


def owner_reference(
    owner: Mapping[str, Any], kind: str, api_version: str = "apps/v1"
) -> JsonObject:
    """The reference kube's workload controllers put on their pods."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name_of(owner),
        "uid": uid_of(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


# --- node fit -------------------------------------------------------------------------------


def _expression_matches(expression: Mapping[str, Any], values_of: Mapping[str, str]) -> bool:
    key = str(expression.get("key") or "")
    operator = expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    present = key in values_of
    value = values_of.get(key, "")
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            actual, bound = int(value), int(values[0])
        except ValueError:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    expressions = list(term.get("matchExpressions") or [])
    fields = list(term.get("matchFields") or [])
    if not expressions and not fields:
        return False  # an empty term selects no node, as in kube
    labels = labels_of(node)
    node_fields = {"metadata.name": name_of(node)}
    return all(_expression_matches(e, labels) for e in expressions) and all(
        _expression_matches(f, node_fields) for f in fields
    )


def fits_node_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """``nodeSelector`` and one of the required node affinity terms match the node."""
    spec = pod.get("spec") or {}
    labels = labels_of(node)
    selector = spec.get("nodeSelector") or {}
    if any(labels.get(str(k)) != str(v) for k, v in selector.items()):
        return False
    required = nested(
        spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"
    )
    terms = (required or {}).get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not terms:
        return True
    return any(isinstance(t, Mapping) and _term_matches(t, node) for t in terms)


def node_taints(node: Mapping[str, Any]) -> list[Taint]:
    taints = []
    for raw in nested(node, "spec", "taints") or []:
        try:
            taints.append(Taint.from_dict(raw))
        except (TaintError, TypeError, AttributeError):
            continue
    return taints


@dataclass(frozen=True)
class Fit:
    """The DaemonSet controller's verdict for a node: place a pod, keep one already there."""

    should_run: bool
    should_continue: bool


def daemon_fit(pod: Mapping[str, Any], node: Mapping[str, Any]) -> Fit:
    """``NodeShouldRunDaemonPod``: affinity must match; an untolerated ``NoExecute`` taint
    evicts, an untolerated ``NoSchedule`` one only keeps new pods off."""
    if is_deleting(node) or not fits_node_affinity(pod, node):
        return Fit(False, False)
    tolerations = list(nested(pod, "spec", "tolerations") or [])
    taints = node_taints(node)
    if untolerated(tolerations, taints, effects=("NoExecute",)) is not None:
        return Fit(False, False)
    return Fit(untolerated(tolerations, taints) is None, True)


# --- expectations ---------------------------------------------------------------------------


@dataclass
class _Pending:
    since: float
    created: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)


class Expectations:
    """Pods a controller created or deleted that its cache does not show yet.

    kube's ``ControllerExpectations``: until the cache catches up (or ``timeout`` passes), the
    controller does not count again, so a stale cache under the threaded driver cannot make
    it create or delete twice. Keyed by owner key; created pods by name, deleted ones by uid.
    """

    def __init__(self, clock: Clock, timeout: float) -> None:
        self._clock, self._timeout = clock, timeout
        self._pending: dict[str, _Pending] = {}

    def created(self, owner: str, name: str) -> None:
        self._entry(owner).created.add(name)

    def deleted(self, owner: str, uid: str) -> None:
        self._entry(owner).deleted.add(uid)

    def forget(self, owner: str) -> None:
        self._pending.pop(owner, None)

    def wait(self, owner: str, pods: Store[JsonObject], namespace: str) -> float | None:
        """Seconds left to wait for ``owner``'s writes to show in ``pods``, or ``None``."""
        entry = self._pending.get(owner)
        if entry is None:
            return None
        entry.created = {n for n in entry.created if pods.get(make_key(n, namespace)) is None}
        if entry.deleted:  # every pod of the namespace read only when a deletion is awaited
            live = {uid_of(p): p for p in pods.list() if namespace_of(p) == namespace}
            entry.deleted = {u for u in entry.deleted if u in live and not is_deleting(live[u])}
        left = entry.since + self._timeout - self._clock.monotonic()
        if (not entry.created and not entry.deleted) or left <= 0:
            del self._pending[owner]
            return None
        return left

    def _entry(self, owner: str) -> _Pending:
        entry = self._pending.get(owner)
        if entry is None:
            entry = self._pending[owner] = _Pending(self._clock.monotonic())
        return entry


def keys_of(objs: Iterable[Mapping[str, Any]]) -> list[str]:
    return [make_key(name_of(o), namespace_of(o) or None) for o in objs]
