"""kube-scheduler's ``unschedulablePods``: which failed pods wait, and which event brings each back.

A pod kube-scheduler could not place is not tried again on every change in the cluster: its
queue keeps it aside with the plugins that rejected it, and each cluster event asks those
plugins' queueing hints whether the event could make it schedulable (read in ``pkg/scheduler``):

- ``backend/queue/scheduling_queue.go: AddUnschedulableIfNotPresent`` parks a failed pod with its
  rejector plugins; ``MoveAllToActiveOrBackoffQueue`` and ``isPodWorthRequeuing`` move it back
  when one of them answers ``Queue`` for the event, or for any event when no plugin rejected it
  (no node at all, an error); ``flushUnschedulablePodsLeftover`` moves back whatever waited
  ``podMaxInUnschedulablePodsDuration`` (5 minutes).
- ``framework/plugins/noderesources/fit.go``: ``isSchedulableAfterNodeChange`` (a Node added
  that the pod fits when empty, or one whose allocatable grew in a resource the pod asks for)
  and ``isSchedulableAfterPodEvent`` (a bound pod deleted; an unbound one frees nothing).
- ``tainttoleration``, ``nodeunschedulable`` and ``nodeaffinity``: a Node added or changed that
  now passes the plugin's filter for the pod and did not before (the stand-in's Ready filter
  plays the ``node.kubernetes.io/not-ready`` taint, so becoming Ready is a taint lifted).
- ``podtopologyspread`` and ``interpodaffinity`` register bound pods' adds, label changes and
  deletes and Nodes' adds and label changes; the stand-in requeues on all of those without
  matching selectors (kube's hints skip some: retrying more costs time, never a placement).
- ``volumebinding`` waits on claims, which the stand-in does not watch: such pods come back on
  any event, as before.
- ``scheduling_queue.go: Update``: a pending pod's update whose only change is status (its
  nomination included; ``isPodUpdated`` ignores ``resourceVersion``, ``generation`` and
  ``status``) leaves it where it is.

The pod goes back to the queue without waiting out its backoff: kube's backoff is 1 s doubling to
10 s, but with ``SchedulerPopFromBackoffQ`` (beta, on by default since v1.33) a pod is taken from
the backoff queue as soon as nothing else is active, which is the stand-in's case, since a cycle
tries every active pod at once.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.sim.scheduler import rules

__all__ = ["FLUSH_AFTER", "VOLUME_BINDING", "SchedulingQueue", "plugins_for"]

FLUSH_AFTER: Final = 300.0
"""``podMaxInUnschedulablePodsDuration``: seconds a pod waits before it is tried anyway."""

NODE_RESOURCES_FIT: Final = "NodeResourcesFit"
TAINT_TOLERATION: Final = "TaintToleration"
NODE_UNSCHEDULABLE: Final = "NodeUnschedulable"
NODE_AFFINITY: Final = "NodeAffinity"
TOPOLOGY_SPREAD: Final = "PodTopologySpread"
INTER_POD_AFFINITY: Final = "InterPodAffinity"
VOLUME_BINDING: Final = "VolumeBinding"

# Plugins whose hints answer Queue to every bound pod's add, label change or deletion.
_POD_PLUGINS: Final = frozenset({TOPOLOGY_SPREAD, INTER_POD_AFFINITY})
_UNSCHEDULABLE_TAINT: Final = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
_CORDONED: Final = {"spec": {"taints": [_UNSCHEDULABLE_TAINT]}}  # never mutated


def plugins_for(reasons: Iterable[str]) -> frozenset[str]:
    """The plugins behind the stand-in's filter messages (``cycle.py``'s wording, kube's)."""
    plugins: set[str] = set()
    for reason in reasons:
        if reason.startswith(("Insufficient ", "Too many pods")):
            plugins.add(NODE_RESOURCES_FIT)
        elif "were not ready" in reason or "untolerated taint" in reason:
            plugins.add(TAINT_TOLERATION)
        elif "were unschedulable" in reason:
            plugins.add(NODE_UNSCHEDULABLE)
        elif "node affinity/selector" in reason:
            plugins.add(NODE_AFFINITY)
        elif "topology spread" in reason:
            plugins.add(TOPOLOGY_SPREAD)
        elif "affinity" in reason:
            plugins.add(INTER_POD_AFFINITY)
        elif "persistentvolumeclaim" in reason:
            plugins.add(VOLUME_BINDING)
    return frozenset(plugins)


@dataclass
class _Parked:
    pod: JsonObject
    plugins: frozenset[str]
    since: float
    requests: dict[str, int]


def _cordoned(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def _tolerates_cordon(pod: Mapping[str, Any]) -> bool:
    return rules.untolerated_taint(pod, _CORDONED) is None


class SchedulingQueue:
    """The pods a cycle leaves aside, and the events that bring them back (module docstring).

    Not thread-safe: the stand-in calls it under its lock.
    """

    def __init__(self) -> None:
        self._parked: dict[str, _Parked] = {}
        # Parked pods any event brings back, and those a bound pod's event brings back: a
        # thousand pending pods' own events must not each walk every parked pod.
        self._anytime: set[str] = set()
        self._on_pods: set[str] = set()
        # Whether ``_parked``'s order is also the order of ``since`` (times never went back).
        self._ordered = True
        self._last_parked = float("-inf")
        # Pod key -> (the pod object, its requests, whether they could be read) as last
        # parked: a pod no hint covers is parked again at every cycle (an event brings it
        # back each time), and the same stored object (never changed in place) is not parsed
        # again. Kept while the pod is pending (``keep_only``).
        self._parsed: dict[str, tuple[JsonObject, dict[str, int], bool]] = {}

    def __len__(self) -> int:
        return len(self._parked)

    def parked(self, key: str) -> bool:
        return key in self._parked

    def park(self, key: str, pod: JsonObject, plugins: frozenset[str], now: float) -> None:
        """``AddUnschedulableIfNotPresent``: the pod failed, rejected by ``plugins``."""
        known = self._parsed.get(key)
        if known is None or known[0] is not pod:
            try:
                known = (pod, rules.pod_requests(pod), True)
            except (ValueError, TypeError, AttributeError, KeyError, OverflowError):
                known = (pod, {}, False)
            self._parsed[key] = known
        requests = known[1]
        if not known[2]:
            # A spec the stand-in cannot read (the cycle said so on the pod): no hint can
            # judge it, so every event brings it back, as before it was parked.
            plugins = frozenset()
        parked = _Parked(pod, plugins, now, requests)
        # Re-inserted at the end: ``_parked`` stays in the order pods were parked, so the
        # longest-parked is first (``next_flush``, ``flush``: no walk over every parked pod at
        # each of the scheduler's reconciles, one per pod event).
        self._parked.pop(key, None)
        self._parked[key] = parked
        self._ordered = self._ordered and now >= self._last_parked
        self._last_parked = max(self._last_parked, now)
        if _any_event(parked):
            self._anytime.add(key)
        if plugins & _POD_PLUGINS or NODE_RESOURCES_FIT in plugins:
            self._on_pods.add(key)

    def forget(self, key: str) -> None:
        """Bound, deleted, or changed in a way that retries it: no longer waiting."""
        if self._parked.pop(key, None) is not None:
            self._anytime.discard(key)
            self._on_pods.discard(key)

    def keep_only(self, keys: Container[str]) -> None:
        """Forget the parked pods that are no longer pending."""
        for key in [key for key in self._parked if key not in keys]:
            self.forget(key)
        for key in [key for key in self._parsed if key not in keys]:
            del self._parsed[key]

    def next_flush(self) -> float | None:
        """When the longest-waiting pod is tried anyway."""
        if not self._parked:
            return None
        if not self._ordered:
            return min(parked.since for parked in self._parked.values()) + FLUSH_AFTER
        return next(iter(self._parked.values())).since + FLUSH_AFTER

    def flush(self, now: float) -> bool:
        """``flushUnschedulablePodsLeftover``: back with every pod that waited 5 minutes."""
        due: list[str] = []
        for key, parked in self._parked.items():
            if now - parked.since < FLUSH_AFTER:
                if self._ordered:
                    break  # parked in order: the rest waited less
                continue
            due.append(key)
        return self._move(due)

    def node_changed(self, old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
        """A Node added (``old`` None) or updated: back with the pods a hint says it may help."""
        if not self._parked:
            return False
        change = _NodeChange(old, new)
        return self._move([key for key, parked in self._parked.items() if change.helps(parked)])

    def bound_pod_changed(self, *, deleted: bool) -> bool:
        """A bound pod added or relabelled, or (``deleted``) deleted or finished."""
        moved = list(self._anytime)
        for key in self._on_pods:
            plugins = self._parked[key].plugins
            if plugins & _POD_PLUGINS or deleted:  # else NodeResourcesFit alone: deletes only
                moved.append(key)
        return self._move(moved)

    def pending_pod_changed(self) -> bool:
        """Another pending pod added, changed or deleted: only pods no hint covers come back."""
        return self._move(list(self._anytime))

    def _move(self, keys: Iterable[str]) -> bool:
        moved = False
        for key in keys:
            if key in self._parked:
                self.forget(key)
                moved = True
        return moved


def _any_event(parked: _Parked) -> bool:
    """No plugin rejected the pod (no node at all, an error), or one the stand-in cannot hint
    for: every event brings it back."""
    return not parked.plugins or VOLUME_BINDING in parked.plugins


class _NodeChange:
    """One Node event, parsed once for all the parked pods it is asked about."""

    def __init__(self, old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> None:
        self.old, self.new = old, new
        self.allocatable = rules.node_allocatable(new)
        self.before = rules.node_allocatable(old) if old is not None else None
        self.relabelled = old is None or rules.labels_of(old) != rules.labels_of(new)
        # What the hints read of the Node alone, read once for every parked pod: a Node that
        # is not Ready tolerates no pod, and one never cordoned lets every pod through.
        self.ready, self.was_ready = (
            rules.node_ready(new),
            old is not None and rules.node_ready(old),
        )
        self.cordoned = _cordoned(new)
        self.was_cordoned = old is not None and _cordoned(old)

    def helps(self, parked: _Parked) -> bool:
        """Whether a rejector plugin's hint answers ``Queue`` for this event."""
        plugins, pod, old, new = parked.plugins, parked.pod, self.old, self.new
        if _any_event(parked):
            return True
        if NODE_RESOURCES_FIT in plugins and self._more_room(parked.requests):
            return True
        # Each filter passes for the pod on the new Node and did not on the old one. Taints:
        # a Ready Node whose taints the pod tolerates (the Ready filter plays the not-ready
        # taint). Cordon: a Node not cordoned, or a pod that tolerates the cordon's taint.
        if (
            TAINT_TOLERATION in plugins
            and self.ready
            and rules.untolerated_taint(pod, new) is None
            and not (
                self.was_ready and old is not None and rules.untolerated_taint(pod, old) is None
            )
        ):
            return True
        if (
            NODE_UNSCHEDULABLE in plugins
            and (not self.cordoned or _tolerates_cordon(pod))
            and (old is None or (self.was_cordoned and not _tolerates_cordon(pod)))
        ):
            return True
        if (
            NODE_AFFINITY in plugins
            and rules.node_affinity_matches(pod, new)
            and (old is None or not rules.node_affinity_matches(pod, old))
        ):
            return True
        return bool(plugins & _POD_PLUGINS) and self.relabelled

    def _more_room(self, requests: Mapping[str, int]) -> bool:
        """``isSchedulableAfterNodeChange``: the pod fits the Node empty, and the Node is new
        or has more of a resource the pod asks for (or more pod slots) than before."""
        allocatable, before = self.allocatable, self.before
        if not all(amount <= allocatable.get(name, 0) for name, amount in requests.items()):
            return False
        if before is None:
            return True
        return any(
            amount and allocatable.get(name, 0) > before.get(name, 0)
            for name, amount in requests.items()
        )
