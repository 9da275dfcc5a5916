"""The simulated cluster's kube-scheduler: binds pending pods to nodes that fit, in batches.

Without it, nodes the autoprovisioner creates in the simulator would stay empty and pending pods
pending forever, so no scenario could tell whether the right capacity was bought. It is a
``Controller`` over pods, but it schedules a whole *cycle* at a time: the first reconcile after
a pod or node event takes every pending pod kube-scheduler's queue would try (new pods, and
those an event brought back from ``unschedulablePods``: ``queue``) in its order (higher
``spec.priority`` first, then creation time, then namespace and name) and places it against
one snapshot of the cluster whose per-node totals and pod counts are updated as each pod is
placed. Later reconciles in the same pass find nothing changed and return at once. That keeps
the order deterministic (a queue would follow event order instead) and the cost of a cycle at
one pass over the pods plus, per pending pod tried, one pass over the nodes.

Among the nodes that pass the filters, a pod goes where kube-scheduler's default profile would
put it: the highest weighted score (``scoring``), ties broken by the scheduler's seeded
generator. So pods spread as they do in a real cluster, and a plan that only works if they
pack tightly shows up as a pod left pending.

Pods this scheduler bound but the cache does not show bound yet are *assumed* on their node, as
kube-scheduler's assume cache does, so a threaded driver with a lagging cache cannot bind a pod
twice or overcommit a node.
"""

from __future__ import annotations

import random
import threading
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

import orjson

from karpenter_capi.core.clock import Clock, format_timestamp
from karpenter_capi.core.kube.cache import object_key
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import Conflict, NotFound
from karpenter_capi.core.kube.resources import NODES, PERSISTENT_VOLUME_CLAIMS, PODS, Resource
from karpenter_capi.core.runtime.controller import DONE, WORKLOAD, Caches, Key, Result, Watch
from karpenter_capi.sim.apiserver.server import InMemoryAPIServer
from karpenter_capi.sim.apiserver.subresources import PodBinder
from karpenter_capi.sim.scheduler import rules, scoring
from karpenter_capi.sim.scheduler.cycle import (
    NodeInfo,
    PodContext,
    PodFacts,
    Snapshot,
    finished,
    metadata,
    unschedulable_message,
)
from karpenter_capi.sim.scheduler.nominated import Nominator, nominated_node
from karpenter_capi.sim.scheduler.queue import VOLUME_BINDING, SchedulingQueue, plugins_for
from karpenter_capi.sim.scheduler.views import SCHEDULER_NAME, PodViews

__all__ = ["CYCLE_KEY", "SCHEDULER_NAME", "SchedulerClient", "SimScheduler", "missing_claim"]

CYCLE_KEY: Final = "sim.kube-scheduler/cycle"
BIND_RETRY: Final = 1.0
"""Seconds before a cycle tries again a pod whose binding was refused as stale (409): kube's
``podInitialBackoffDuration``, the backoff a binding failure puts the pod through."""
"""The key node events enqueue: any key starts a cycle, this one names no pod."""


def missing_claim(client: KubeClient, pod: Mapping[str, Any]) -> str | None:
    """kube-scheduler's VolumeBinding PreFilter: a claim that does not exist leaves the pod
    unschedulable whatever the nodes (``persistentvolumeclaim "data" not found``)."""
    namespace = metadata(pod).get("namespace")
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        claim = ((volume or {}).get("persistentVolumeClaim") or {}).get("claimName")
        if not claim:
            continue
        try:
            client.get(PERSISTENT_VOLUME_CLAIMS, str(claim), namespace)
        except NotFound:
            return f'persistentvolumeclaim "{claim}" not found'
    return None


_IGNORED_META: Final = frozenset({"resourceVersion", "managedFields", "generation"})


def _scheduling_view(pod: JsonObject) -> JsonObject:
    """The pod without what does not make kube-scheduler look at it again
    (``scheduling_queue.go: isPodUpdated`` strips ``resourceVersion``, ``generation`` and the
    status, the nomination included), and whether it has finished (a bound pod that has, like
    a deleted one, frees its room)."""
    meta = {k: v for k, v in metadata(pod).items() if k not in _IGNORED_META}
    return {"metadata": meta, "spec": pod.get("spec") or {}, "finished": finished(pod)}


def _node_name(view: Mapping[str, Any] | None) -> str | None:
    return None if view is None else view["spec"].get("nodeName")


def _shape(pod: JsonObject) -> bytes | None:
    """What the filters read of a pending pod: its namespace, labels and spec (``None`` when
    they cannot be serialized). Two pods of one shape fail on one snapshot for one reason."""
    meta = metadata(pod)
    try:
        return orjson.dumps(
            [meta.get("namespace"), meta.get("labels"), pod.get("spec")],
            option=orjson.OPT_SORT_KEYS,
        )
    except TypeError:
        return None


class SchedulerClient(KubeClient, PodBinder, Protocol):
    """What the stand-in writes through: the API, and ``pods/binding`` (the in-memory server,
    or a wrapper of one such as ``FaultyClient``)."""


class SimScheduler:
    """A kube-scheduler stand-in for the simulator; add it to a ``Manager`` like any controller.

    Only pods whose ``spec.schedulerName`` is unset or ``default-scheduler`` are scheduled.
    """

    name = "sim.kube-scheduler"
    primary: Resource = NODES
    """Nodes, not pods: a primary event enqueues its object's key, and most pod events (the
    kubelet's status writes, this scheduler's own ``PodScheduled`` writes) are no scheduling
    event; ``_on_pod`` enqueues ``CYCLE_KEY`` for those that are. A node's events all are."""
    primary_cluster = WORKLOAD

    def __init__(
        self, client: SchedulerClient, caches: Caches, clock: Clock, *, seed: int = 0
    ) -> None:
        self.client, self.caches, self.clock = client, caches, clock
        # Breaks ties between equally scored nodes; seeded so a run repeats for its seed.
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._dirty = True
        self._assumed: dict[str, tuple[str, str]] = {}  # pod key -> (uid, node)
        # Pod key -> the pod as this scheduler's last status write stored it, while the cache
        # does not show that version and the pod is pending (``_latest``).
        self._written: dict[str, JsonObject] = {}
        self._facts = PodFacts()  # what each cycle's snapshot reads of each pod
        self._views = PodViews()  # what each cycle's walk over the pods reads of each pod
        # The last cycle's snapshot, and the nodes and placed pods it was made of, while no pod
        # was placed on it; the pod shapes that failed on it (``_schedule_one``).
        self._snapshot: tuple[Snapshot, list[JsonObject], list[tuple[JsonObject, str]]] | None
        self._snapshot = None
        self._failed: dict[bytes, tuple[str, frozenset[str]]] = {}
        # Pod key -> (the pod, and the condition) of the last ``_set_scheduled`` that left the
        # pod's condition as the API holds it (``_set_scheduled``).
        self._tried: dict[str, tuple[JsonObject, str, str | None, str | None]] = {}
        self._shapes: dict[str, tuple[JsonObject, bytes | None]] = {}  # pending pods' ``_shape``
        self._seen: dict[str, JsonObject] = {}  # pod key -> the pod as a cycle would see it
        self._seen_at: dict[str, str] = {}  # pod key -> the resourceVersion it was seen at
        self._queue = SchedulingQueue()
        # Events not yet put to the queue: a node, or (pod key, before, after; None when
        # absent). Appended by the informers' threads, drained under the lock by a cycle, so
        # an event during a cycle is asked about the pods that cycle parks (kube's in-flight
        # events).
        self._events: deque[JsonObject | tuple[str, JsonObject | None, JsonObject | None]] = deque()
        self._nodes: dict[str, JsonObject] = {}  # node name -> the Node as last put to the queue
        self._timer: tuple[float, Key] | None = None  # the flush timer asked for, and its key
        self._refused = False  # a binding was refused (409) in the last cycle: try it again
        self.cycles = 0
        """Scheduling cycles run (a cycle is skipped when nothing changed)."""
        self.bound_as_nominated = 0
        """Pods bound to the node ``status.nominatedNodeName`` named when they were tried."""
        self.bound_elsewhere = 0
        """Pods bound to another node than the one they were nominated to."""

    def watches(self) -> Sequence[Watch]:
        return [Watch(NODES, to_keys=self._on_node), Watch(PODS, to_keys=self._on_pod)]

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return []

    def _on_node(self, node: JsonObject) -> Iterable[Key]:
        self._events.append(node)
        self._dirty = True
        return ()  # the node's own key is enqueued as the primary event

    def _on_pod(self, pod: JsonObject) -> Iterable[Key]:
        # A change kube-scheduler's queue ignores (status, the nomination included) is no
        # event: no cycle for that. Called on the informer's thread, which alone writes
        # ``_seen``; the cache moves before the handlers are told, so a pod it no longer has
        # was deleted (an update's old side is still there, as its new one).
        key = object_key(pod)
        before = self._seen.get(key)
        if self.caches.store(PODS).get(key) is None:
            if key not in self._seen:
                return ()
            del self._seen[key]
            self._seen_at.pop(key, None)
            self._events.append((key, before, None))  # deleted
            self._dirty = True
            return (CYCLE_KEY,)
        # One resourceVersion is one content: the old side of an update was seen already.
        version = metadata(pod).get("resourceVersion")
        if version and self._seen_at.get(key) == version:
            return ()
        seen = _scheduling_view(pod)
        if version:
            self._seen_at[key] = version
        if before == seen:
            return ()
        self._seen[key] = seen
        self._events.append((key, before, seen))
        self._dirty = True
        return (CYCLE_KEY,)

    def reconcile(self, key: Key) -> Result:
        with self._lock:
            now = self.clock.monotonic()
            if self._queue.flush(now):
                self._dirty = True
            if self._dirty:
                self._dirty = False
                try:
                    self.schedule_cycle()
                except BaseException:
                    self._dirty = True  # retried with backoff: the next attempt must run a cycle
                    raise
            if self._refused:
                # The pod's own update is what the cache missed, and a change of status is no
                # scheduling event: nothing else would bring it back (handleBindingCycleError).
                self._refused = False
                self._dirty = True
                return Result(requeue_after=BIND_RETRY)
            return self._flush_timer(key, now)

    def _flush_timer(self, key: Key, now: float) -> Result:
        """Come back when the longest-parked pod is due to be flushed; one timer at a time
        (a reconcile of the key that holds it takes it over)."""
        flush_at = self._queue.next_flush()
        if flush_at is None:
            self._timer = None
            return DONE
        if self._timer is not None and self._timer[0] <= flush_at and self._timer[1] != key:
            return DONE  # an earlier timer is pending: it asks again when it fires
        self._timer = (flush_at, key)
        return Result(requeue_after=max(flush_at - now, 0.001))

    def _put_events(self) -> None:
        """Ask the queue about every event since the last cycle (``queue`` module)."""
        while self._events:
            event = self._events.popleft()
            if not isinstance(event, tuple):
                name = str(metadata(event).get("name", ""))
                self._queue.node_changed(self._nodes.get(name), event)
                self._nodes[name] = event
                continue
            self._put_pod_event(*event)

    def _put_pod_event(self, key: str, before: JsonObject | None, after: JsonObject | None) -> None:
        """Tell the queue what a pod's change may unblock: a pending pod's own change, or a
        bound pod leaving, finishing, arriving or relabelled (room and affinity change)."""
        was_on, now_on = _node_name(before), _node_name(after)
        if after is not None and not now_on:
            if before is not None:  # its own change: tried again
                self._queue.forget(key)
            self._queue.pending_pod_changed()
            return
        self._queue.forget(key)
        if after is None:  # deleted
            if was_on and not before["finished"]:  # type: ignore[index]
                self._queue.bound_pod_changed(deleted=True)
            elif not was_on:
                self._queue.pending_pod_changed()
        elif after["finished"]:
            if before is None or not before["finished"]:
                self._queue.bound_pod_changed(deleted=True)
        elif not was_on or rules.labels_of(before or {}) != rules.labels_of(after):
            self._queue.bound_pod_changed(deleted=False)  # bound, or relabelled

    def schedule_cycle(self) -> None:
        """Place every pending pod the queue would try, in its order, against one snapshot of
        the cluster."""
        self.cycles += 1
        self._put_events()
        bound, pending = self._bound_and_pending(self.caches.store(PODS).list())
        queue = self._queue
        queue.keep_only(pending.keys())
        for kept in (self._shapes, self._written, self._tried):  # only pending pods are tried
            for key in [key for key in kept if key not in pending]:  # again
                del kept[key]
        active = [(key, pod) for key, pod in pending.items() if not queue.parked(key)]
        if not active:
            return
        order = self._views.order
        active.sort(key=lambda keyed: order(keyed[1]))
        snapshot = self._snapshot_of(self.caches.store(NODES).list(), bound)
        nominator = Nominator(pending.values())  # parked pods keep their nominated room too
        failed = self._failed
        for key, pod in active:
            try:
                self._schedule_one(key, pod, snapshot, nominator, failed)
            except (ValueError, TypeError, AttributeError, KeyError) as exc:
                # The API server refuses such a spec, so kube-scheduler never meets one; the
                # stand-in leaves it pending, said why, rather than stop the cycle for all pods.
                nominator.remove(pod)
                self._fail(key, pod, f"cannot read the pod's spec: {exc}", frozenset())

    def _snapshot_of(
        self, nodes: list[JsonObject], bound: list[tuple[JsonObject, str]]
    ) -> Snapshot:
        """A snapshot of ``nodes`` with ``bound`` placed: the last cycle's again when it placed
        no pod and was made of the same stored objects (never changed in place), else a new
        one, on which no shape has failed yet (``_failed``).

        A burst runs a cycle per few pods, and in a cluster with no room (none yet, or nodes
        not Ready) the pods an event brings back fail again against the same cluster. What a
        pod's attempt computes depends on the snapshot, the pod's shape and the nominations
        (``_schedule_one`` keeps a shape's failure only while none holds), so a shape that
        failed on this snapshot fails again for the same reasons, as it would were every node
        filtered again (``pkg/scheduler/schedule_one.go: findNodesThatFitPod``)."""
        last = self._snapshot
        if (
            last is not None
            and len(last[1]) == len(nodes)
            and len(last[2]) == len(bound)
            and all(a is b for a, b in zip(last[1], nodes, strict=True))
            and all(a[0] is b[0] and a[1] == b[1] for a, b in zip(last[2], bound, strict=True))
        ):
            return last[0]
        self._facts.next_cycle()
        snapshot = Snapshot(nodes, bound, self._facts)
        self._snapshot = (snapshot, nodes, bound)
        self._failed.clear()
        return snapshot

    def _bound_and_pending(
        self, pods: list[JsonObject]
    ) -> tuple[list[tuple[JsonObject, str]], dict[str, JsonObject]]:
        """(pod, node) of every running pod, bound or assumed bound by an earlier cycle whose
        binding the cache has not seen yet; and the pending pods this scheduler places, by key.
        Assumptions the cache now answers (or whose pod went) are dropped."""
        bound: list[tuple[JsonObject, str]] = []
        pending: dict[str, JsonObject] = {}
        live: set[str] = set()
        for pod, view in self._views.walk(pods):
            key = view.key
            live.add(key)
            node_name = view.node_name
            assumed = self._assumed.get(key)
            if node_name or (assumed and assumed[0] != view.uid):
                self._assumed.pop(key, None)
                assumed = None
            if view.finished:
                continue
            if node_name:
                bound.append((pod, node_name))
            elif assumed:
                bound.append((pod, assumed[1]))
            elif view.wanted:
                pending[key] = pod
        for key in [k for k in self._assumed if k not in live]:
            del self._assumed[key]
        return bound, pending

    def _schedule_one(
        self,
        key: str,
        pod: JsonObject,
        snapshot: Snapshot,
        nominator: Nominator,
        failed: dict[bytes, tuple[str, frozenset[str]]],
    ) -> None:
        """Place ``pod`` or fail it. ``failed``: the message and plugins of each pod shape
        (``_shape``) that failed against ``snapshot`` as it is now (emptied when a pod is
        placed): a shape meets the same filters on the same snapshot, so the next pod of a
        Deployment fails for the same reasons without testing every node again. Only while
        no pod is nominated anywhere (nominations make room depend on the pod)."""
        missing = missing_claim(self.client, pod) if self._views.claims(pod) else None
        if missing is not None:
            nominator.remove(pod)
            nodes = len(snapshot.nodes)
            self._fail(
                key,
                pod,
                f"0/{nodes} nodes are available: {missing}. preemption: 0/{nodes} nodes are "
                "available: Preemption is not helpful for scheduling.",
                frozenset({VOLUME_BINDING}),
            )
            return
        shape = self._shape(key, pod) if nominator.empty() else None
        known = failed.get(shape) if shape is not None else None
        if known is not None:
            self._fail(key, pod, *known)
            return
        context = PodContext(pod, snapshot)
        feasible = self._nominated_fit(pod, context, snapshot, nominator)
        reasons: Counter[str] = Counter(context.static.reasons)
        for node in context.static.passing if not feasible else ():
            failures = context.failures(node, nominator.reserved(node.name, pod))
            if failures:
                reasons.update(failures)
            else:
                feasible.append(node)
        # Assumed on a node or failed: either way the pod no longer holds room elsewhere.
        nominator.remove(pod)
        if not feasible:
            message = unschedulable_message(len(snapshot.nodes), reasons)
            plugins = plugins_for(reasons)
            if shape is not None:
                failed[shape] = (message, plugins)
            self._fail(key, pod, message, plugins)
            return
        if len(feasible) == 1:  # kube-scheduler does not score a single feasible node either
            chosen = feasible[0].name
        else:
            chosen = feasible[
                scoring.select_host(context.totals(feasible, snapshot), self._rng)
            ].name
        if self._bind(pod, chosen):
            snapshot.place(pod, chosen)
            self._snapshot = None  # changed: the next cycle makes its own
            failed.clear()
            nominated = nominated_node(pod)
            if nominated == chosen:
                self.bound_as_nominated += 1
            elif nominated is not None:
                self.bound_elsewhere += 1

    def _shape(self, key: str, pod: JsonObject) -> bytes | None:
        """``_shape``, once per stored pod object (never changed in place): a pod no hint
        covers is tried again at every cycle."""
        known = self._shapes.get(key)
        if known is None or known[0] is not pod:
            known = (pod, _shape(pod))
            self._shapes[key] = known
        return known[1]

    @staticmethod
    def _nominated_fit(
        pod: JsonObject, context: PodContext, snapshot: Snapshot, nominator: Nominator
    ) -> list[NodeInfo]:
        """``evaluateNominatedNode``: the nominated node alone when it passes every filter
        (with what the other pods nominated there keep), else nothing."""
        name = nominator.node_of(pod)
        node = snapshot.by_name.get(name) if name is not None else None
        if node is None or not any(node is passing for passing in context.static.passing):
            return []
        return [] if context.failures(node, nominator.reserved(node.name, pod)) else [node]

    def _bind(self, pod: JsonObject, node_name: str) -> bool:
        """Create the pod's ``pods/binding``, as kube-scheduler's DefaultBinder does: one write,
        in which the API server sets ``spec.nodeName`` and ``PodScheduled=True`` and clears
        the nomination. The Binding names the pod's uid (as DefaultBinder) and the
        resourceVersion the cycle read (a precondition the API allows): a pod changed since
        the cache saw it is refused (409) and tried again."""
        meta = metadata(pod)
        name, namespace = meta["name"], str(meta.get("namespace") or "")
        binding_meta: JsonObject = {"name": name, "namespace": namespace}
        for field in ("uid", "resourceVersion"):
            if meta.get(field):
                binding_meta[field] = meta[field]
        binding: JsonObject = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": binding_meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        try:
            self.client.bind(binding, namespace)
        except NotFound:
            return False  # gone: its deletion is an event
        except Conflict:
            # Changed since the cache saw it, or bound or deleted meanwhile: tried again
            # (``reconcile``).
            self._refused = True
            return False
        self._assumed[object_key(pod)] = (str(meta.get("uid", "")), node_name)
        return True

    def _patch_status(self, name: str, patch: JsonObject, namespace: str | None) -> JsonObject:
        """A pod status write whose answer is only read, never changed: from the in-memory
        server, the stored object itself (``shared``), not a copy made for nothing."""
        if isinstance(self.client, InMemoryAPIServer):
            return self.client.patch(
                PODS, name, patch, namespace, subresource="status", shared=True
            )
        return self.client.patch(PODS, name, patch, namespace, subresource="status")

    def _fail(self, key: str, pod: JsonObject, message: str, plugins: frozenset[str]) -> None:
        """Parked until an event ``plugins``' hints answer for; ``PodScheduled=False`` says
        why (``handleSchedulingFailure``)."""
        self._queue.park(key, pod, plugins, self.clock.monotonic())
        self._set_scheduled(key, pod, "False", "Unschedulable", message)

    def _latest(self, key: str, pod: JsonObject) -> JsonObject:
        """``pod``, or the newer version this scheduler's own last status write stored, while
        the cache does not show it yet.

        kube's scheduling queue holds each pod as the informer last delivered it, and its own
        ``PodScheduled`` write comes back through that informer long before the pod is tried
        again (1 s of backoff, or an idle queue's turn: microseconds). Here the cache can lag
        a whole cycle behind under load, and a pod tried again meanwhile (an unplaceable pod
        comes back on every event) was compared with its version before that write: the
        condition looked missing, and was written again, with a new ``lastTransitionTime``
        once the clock's second had turned (a new resourceVersion and watch event for every
        watcher, the controller's included, for a condition that had not changed)."""
        mine = self._written.get(key)
        if mine is None:
            return pod
        meta, written = metadata(pod), metadata(mine)
        try:
            newer = written.get("uid") == meta.get("uid") and int(
                written.get("resourceVersion") or 0
            ) > int(meta.get("resourceVersion") or 0)
        except ValueError:
            newer = False
        if not newer:
            del self._written[key]  # the cache caught up (or the pod is another one)
            return pod
        return mine

    def _set_scheduled(
        self, key: str, pod: JsonObject, status: str, reason: str | None, message: str | None
    ) -> None:
        """Write the pod's ``PodScheduled`` condition when it changes (``updatePod``)."""
        tried = (pod, status, reason, message)
        last = self._tried.get(key)
        if last is not None and last[0] is pod and last[1:] == tried[1:]:
            # The same stored pod failed the same way again: its last call left the API's
            # pod with this condition (wrote it, or found it), and only this method's own
            # writes (``_written``) could have changed what it compares with since.
            return
        if self._set_condition(key, pod, status, reason, message):
            self._tried[key] = tried

    def _set_condition(
        self, key: str, pod: JsonObject, status: str, reason: str | None, message: str | None
    ) -> bool:
        """Whether the API's pod now has the condition (found, or written)."""
        pod = self._latest(key, pod)
        conditions = list((pod.get("status") or {}).get("conditions") or [])
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        # Failed: kube-scheduler's ``clearNominatedNode`` (a binding clears it server-side).
        nominated = nominated_node(pod) is not None
        if (
            not nominated
            and current is not None
            and current.get("status") == status
            and current.get("reason") == reason
            and current.get("message") == message
        ):
            return True
        condition: JsonObject = {"type": "PodScheduled", "status": status}
        if reason is not None:
            condition["reason"] = reason
        if message is not None:
            condition["message"] = message
        same = current is not None and current.get("status") == status
        condition["lastTransitionTime"] = (
            current.get("lastTransitionTime") if same and current is not None else None
        ) or format_timestamp(self.clock.now())
        conditions = [c for c in conditions if c.get("type") != "PodScheduled"] + [condition]
        meta = metadata(pod)
        written: JsonObject = {"conditions": conditions}
        if nominated:
            written["nominatedNodeName"] = None
        try:
            self._written[key] = self._patch_status(
                meta["name"], {"status": written}, meta.get("namespace")
            )
        except NotFound:
            return False  # gone: its deletion is an event
        return True
