"""Provisioning as a controller: the batching window and the round, run by the runtime.

Provisioning has no primary object: it looks at every pending pod at once. So it is a
periodic controller that, every ``interval``, feeds the pending pods from the informer caches
to the batching window and runs a round (:class:`~.provisioner.Provisioner`) over the cached
view when the window closes. Reading caches rather than listing keeps a round cheap however
often it runs; the NodeClaims it creates come back through the NodeClaim informer and count as
in flight in the next round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.indexes import BY_OWNER_UID
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    DAEMONSETS,
    NAMESPACES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PODS,
    REPLICASETS,
    Resource,
)
from karpenter_capi.core.provisioning.batcher import Batcher
from karpenter_capi.core.provisioning.pending import is_provisionable
from karpenter_capi.core.provisioning.plans import missing_claims
from karpenter_capi.core.provisioning.provisioner import Provisioner
from karpenter_capi.core.provisioning.relook import RECHECK_SECONDS, RoundView
from karpenter_capi.core.provisioning.report import ProvisioningReport
from karpenter_capi.core.provisioning.state import ClusterSnapshot, unreplaced_pods
from karpenter_capi.core.runtime.controller import WORKLOAD, ControllerContext, Result
from karpenter_capi.core.scheduling.packing import DEFAULT_BUDGET_SECONDS as DEFAULT_PACKING_BUDGET
from karpenter_capi.core.scheduling.podspec import pod_key

log = logging.getLogger(__name__)

DEFAULT_POLL_SECONDS: Final = 0.5
RETRY_AFTER_NODEPOOL_ERRORS_SECONDS: Final = 10.0
"""How soon pods a round left pending are looked at again when a NodePool could not be used
(upstream requeues every pending pod after 10 s). The cause is often outside this cluster
(the management cluster down, a cloud API failing): nothing in the cached view changes when
it recovers, so without this the pods would wait for an unrelated event."""
RETRY_AFTER_UNREACHABLE_SECONDS: Final = 1.0
"""How soon instead when every such NodePool failed for a server away or not answering yet
(``kube.errors.unreachable``): a round whose own reads failed so was retried as soon, and the
pods should not wait ten seconds past the server's return."""
ROUND_RESOURCES: Final = (
    PODS,
    NODES,
    NODECLAIMS,
    NODEPOOLS,
    DAEMONSETS,
    NAMESPACES,
    CLUSTER_API_NODE_CLASSES,
)
"""What a round reads from the caches: the cluster snapshot, NodePools and their NodeClasses."""


_COMPLETE_KEPT: Final = 1024
"""ReplicaSets whose completeness is remembered (``ProvisioningController.complete``)."""


def _active(pod: Mapping[str, Any] | None) -> bool:
    """A pod a ReplicaSet counts towards its replicas (kube's ``FilterActivePods``)."""
    if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


class ProvisioningController:
    """Runs a provisioning round whenever the batching window closes."""

    name = "provisioner"
    latency_sensitive = True
    """A shared worker pool (fleet mode) runs its decisions ahead of other clusters' queued
    work: pods wait on them, status writes do not. Which runs are decisions: ``urgent_run``."""

    def __init__(
        self,
        ctx: ControllerContext,
        *,
        batcher: Batcher | None = None,
        interval: float = DEFAULT_POLL_SECONDS,
        provisioner: Provisioner | None = None,
        packing_budget: float = DEFAULT_PACKING_BUDGET,
        plans_nominated: bool = False,
        create_concurrency: int = 1,
        wake_on_pods: bool = False,
        complete_idle: float | None = None,
    ) -> None:
        self._ctx = ctx
        self._wake_on_pods = wake_on_pods
        self.interval = interval
        self._batcher = batcher or Batcher(ctx.clock)
        self._bursts_by_owner = complete_idle is not None
        # ReplicaSet uid -> (replicas wanted, pods indexed, complete): a batch window sees each
        # pending pod anew, and recounting a 600-pod ReplicaSet's active pods for each of them
        # was a few percent of the controller's CPU in a 1,000-pod burst.
        self._complete: dict[str, tuple[int, int, bool]] = {}
        if complete_idle is not None:
            # Needs the pods' index by owner uid (``Operator`` registers it).
            self._batcher.track(self, complete_idle)
        self._provisioner = provisioner or Provisioner(
            ctx.client,
            ctx.plugins,
            ctx.clock,
            recorder=ctx.recorder,
            dry_run=ctx.dry_run,
            metrics=ctx.metrics,
            packing_budget=packing_budget,
            plans_nominated=plans_nominated,
            create_concurrency=create_concurrency,
            pod_specs=ctx.pod_specs,
            stores=ctx.caches.store,
        )
        self.last_report: ProvisioningReport | None = None
        # What the cluster looked like at the last round, for pods it left pending.
        self._last_world: RoundView | None = None
        # clock.monotonic() at which a round checks pods still pending after a change that
        # could not alter the last round's decision (``relook``).
        self._recheck_at: float | None = None
        self._round_at = 0.0  # clock.monotonic() of the last round
        # clock.monotonic() at which to run a round again although nothing changed.
        self._retry_at: float | None = None
        # Whether this process has not looked yet (``run_once``: an interrupted plan).
        self._first_look = True
        # What the caches held at the last look that ran no round (``_unchanged_since``), and
        # whether it found pods pending.
        self._idle_stamp: tuple[object, ...] | None = None
        self._idle_pending = False

    def urgent_run(self) -> bool:
        """Whether a run now would be a first decision: its batch window holds a pod no round
        has seen (or the process has not looked yet). A shared pool runs only those in its
        urgent lane; a look that finds nothing, a recheck and a relook (pods a round already
        placed, ``relook``) wait their turn with other work, so that at a fleet's saturated
        wave (100 clusters: some 800 rechecks for 100 first decisions) they do not hold the
        workers a closing window needs. Cheap: the pool asks it under its lock."""
        return self._first_look or self._batcher.holds_new_pods

    def nominated_within(self, seconds: float) -> frozenset[str]:
        """Nodes and NodeClaims pending pods were counted on in the last ``seconds``."""
        return self._provisioner.nominated_within(seconds)

    def nominations(self) -> dict[str, frozenset[str]]:
        """NodeClaim (or node) name -> keys of the pending pods it was launched or counted for."""
        return self._provisioner.nominations()

    def planned(self) -> dict[str, str] | None:
        """Pending pod key -> the NodeClaim or node the last round placed it on."""
        return self._provisioner.planned()

    def reads(self) -> Sequence[tuple[Resource, str]]:
        owners = (REPLICASETS,) if self._bursts_by_owner else ()
        return [(resource, WORKLOAD) for resource in (*ROUND_RESOURCES, *owners)]

    def wake_on(self) -> Sequence[tuple[Resource, str, Callable[[JsonObject], float | None]]]:
        """With ``wake_on_pods`` (``karpenter-capi run``), each pending pod's event feeds the
        batch window and a new window asks for a run when it closes, as upstream's provisioner
        is triggered by pod events: otherwise the window opened only at the next look, up to
        ``interval`` (0.5 s) after the pod. A simulation keeps looking on its schedule, so
        its rounds fall on the same virtual instants run after run."""
        if not self._wake_on_pods:
            return []
        wakes: list[tuple[Resource, str, Callable[[JsonObject], float | None]]]
        wakes = [(PODS, WORKLOAD, self._pod_event)]
        if self._bursts_by_owner:
            # The ReplicaSets' cache can lag the pods' events (two watches): a window that found
            # an owner short waits the full idle second unless its owner's event asks again.
            wakes.append((REPLICASETS, WORKLOAD, self._owner_event))
        return wakes

    def _pod_event(self, pod: JsonObject) -> float | None:
        if not is_provisionable(pod):
            return None
        wait = self._batcher.saw(pod_key(pod))
        if wait is None:
            return None
        # A new pod of the window: parsed here, while the window is open, and kept for the
        # round (``PodSpecs``, by the pod's version), which then finds it parsed: reading a
        # 200-pod burst was about a seventh of a round's CPU, after the window closed.
        self._ctx.pod_specs.get(pod)
        return self._ctx.clock.monotonic() + wait

    def _owner_event(self, _replicaset: JsonObject) -> float | None:
        """A ReplicaSet changed: when the open window now closes (sooner if it completed a
        burst), ``None`` when no window is open."""
        wait = self._batcher.seconds_until_ready()
        return None if wait is None else self._ctx.clock.monotonic() + wait

    def owner_of(self, key: str) -> str | None:
        """The pending pod's ReplicaSet, as ``namespace/name/uid``, for the batch window (see
        ``batcher``); ``None`` for a pod no ReplicaSet controls."""
        pod = self._ctx.caches.store(PODS).get(key)
        if pod is None:
            return None
        metadata = pod.get("metadata") or {}
        for ref in metadata.get("ownerReferences") or []:
            if isinstance(ref, Mapping) and ref.get("controller") is True:
                if ref.get("kind") == "ReplicaSet" and ref.get("apiVersion") == "apps/v1":
                    return f"{metadata.get('namespace') or ''}/{ref.get('name')}/{ref.get('uid')}"
                return None
        return None

    def complete(self, owner: str) -> bool:
        """Whether the ReplicaSet ``owner`` has as many active pods as it asks for."""
        namespace, name, uid = owner.split("/")
        caches = self._ctx.caches
        replicaset = caches.store(REPLICASETS).get(f"{namespace}/{name}")
        if replicaset is None or (replicaset.get("metadata") or {}).get("uid") != uid:
            return False  # not seen yet: its size is unknown
        wanted = (replicaset.get("spec") or {}).get("replicas", 1)
        if not isinstance(wanted, int):
            return False
        pods = caches.store(PODS)
        indexed = pods.index_count(BY_OWNER_UID, uid)
        if indexed < wanted:
            return False  # the common case while the burst grows: no pod is read
        known = self._complete.get(uid)
        if known is not None and known[:2] == (wanted, indexed):
            # Counted with the same replicas and pods: a pod only stops being active (kube's
            # own count then creates a replacement, which changes the pods indexed).
            return known[2]
        keys = pods.index_keys(BY_OWNER_UID, uid)
        complete = sum(1 for k in keys if _active(pods.get(k))) >= wanted
        if len(self._complete) >= _COMPLETE_KEPT:
            self._complete.clear()  # owners come and go: keep the memo bounded
        self._complete[uid] = (wanted, indexed, complete)
        return complete

    def _snapshot(self) -> ClusterSnapshot:
        caches = self._ctx.caches
        snapshot = ClusterSnapshot.from_stores(lambda resource: caches.store(resource).list())
        # Read your own writes: the last round's NodeClaims count even if the watch lags.
        unseen = self._provisioner.unseen
        if unseen.needs_list:
            # A create's answer was lost: what it made may not be cached yet (``unseen``).
            unseen.listed(self._ctx.client.list(NODECLAIMS).items, snapshot.nodeclaims)
        snapshot.nodeclaims = unseen.merged(
            snapshot.nodeclaims, caches.resource_version(NODECLAIMS)
        )
        return snapshot

    def _retry_due(self) -> bool:
        return self._retry_at is not None and self._ctx.clock.monotonic() >= self._retry_at

    def _stamp(self) -> tuple[object, ...]:
        """What a look reads, as change counts: equal stamps, equal snapshots."""
        caches = self._ctx.caches
        unseen = self._provisioner.unseen
        return (
            *(caches.store(resource).changes for resource in ROUND_RESOURCES),
            len(unseen),
            unseen.needs_list,
            caches.resource_version(NODECLAIMS) if len(unseen) else "",
        )

    def _unchanged_since_last_look(self, stamp: tuple[object, ...]) -> bool:
        """Whether this look would do exactly what the last one did: nothing it reads changed,
        no batch window is open (a pod event opens one without changing a store) and no retry
        has come due. A fleet's idle clusters each look twice a second; re-reading every pod
        to find the same answer was most of an idle member's CPU."""
        return (
            stamp == self._idle_stamp
            and self._batcher.seconds_until_ready() is None
            and not (self._idle_pending and (self._retry_due() or self._recheck_due()))
        )

    def _recheck_due(self) -> bool:
        return self._recheck_at is not None and self._ctx.clock.monotonic() >= self._recheck_at

    def _changed_under_pending(self, world: RoundView) -> bool:
        """Whether pods the last round left pending need a round now: the cluster changed in
        a way that can alter what it decided for them (``relook``), or ``RECHECK_SECONDS``
        have passed since that round, changed or not. A round reads more than its view (the
        NodePools and their limits, the NodeClasses, the provider's offerings), so waiting
        for a change of the view alone could leave pods pending for ever after, say, a
        NodePool's limit was raised; upstream requeues each pending pod's trigger every 10 s
        (``provisioning/controller.go: PodController.Reconcile``)."""
        last = self._last_world
        if last is None:
            return False
        if not last.same(world) and last.may_change_decision(
            world, self._ctx.caches.store(PODS).get
        ):
            return True
        return self._recheck_due()

    def run_once(self) -> Result:
        stamp = self._stamp()
        if not self._first_look and self._unchanged_since_last_look(stamp):
            return Result(requeue_after=self.interval)
        self._idle_stamp = None
        snapshot = self._snapshot()
        pending, keys = self._provisioner.pending(snapshot)
        # The pods of a node going away with nothing replacing it open a window too.
        self._batcher.observe([*keys, *map(pod_key, unreplaced_pods(snapshot))])
        # What the round saw: read only when pods are pending or a round runs (a look that
        # finds none pending and no window closed returns without it).
        world = RoundView.of(snapshot, pending, keys) if pending else None
        if world is not None and self._changed_under_pending(world):
            # Pods a round left pending (expecting them to fit somewhere) are still pending and
            # the nodes, NodeClaims or pods have changed since in a way that can alter where
            # they go: look again, as a pod event would make Karpenter do, instead of waiting
            # for a new pod.
            self._batcher.trigger()
            self._last_world = None
        elif pending and self._retry_due():
            # The last round could not use a NodePool; whatever broke it may have recovered.
            self._batcher.trigger()
        # A new process's first look that finds a plan its predecessor was killed creating
        # (``plans.py``) finishes it at once: its pods waited out their window already, and
        # each second between the plan's first nodes and the others lets kube-scheduler fill
        # the first with pods planned for the others (the simulated 1,000-pod scale-up bought
        # 10 NodeClaims more for a one-second gap, then replaced them one by one).
        resume = self._first_look and bool(pending) and bool(missing_claims(snapshot.nodeclaims))
        self._first_look = False
        if not resume and not self._batcher.ready():
            wait = self._batcher.seconds_until_ready()
            if wait is None:
                self._idle_stamp, self._idle_pending = stamp, bool(pending)
            return Result(requeue_after=self.interval if wait is None else max(wait, 0.01))
        first = self._batcher.holds_new_pods
        self._batcher.reset()
        if world is None:
            world = RoundView.of(snapshot, pending, keys)
        self._last_world = world
        self._round_at = self._ctx.clock.monotonic()
        self._recheck_at = self._round_at + RECHECK_SECONDS
        try:
            report = self._provisioner.reconcile(snapshot)
        except Exception:
            # The round failed part-way (say a 429 creating a NodeClaim). Its pods are still
            # pending and no new pod may ever come to reopen the window, so reopen it here:
            # the retry solves them again, counting whatever NodeClaims the round did create.
            self._batcher.trigger(new_pods=first)
            self._last_world = None
            raise
        self.last_report = report
        # A dry run's NodeClaims are never created: counted as launched they would look gone.
        launched = [] if self._ctx.dry_run else [d.nodeclaim for d in report.launched]
        # Each pending pod's class as this round parsed it (a cache hit): kube-scheduler
        # binding one replica where the plan put another is no reason to look again.
        classes = {spec.key: spec.class_key for spec in map(self._ctx.pod_specs.get, pending)}
        self._last_world = world.after_round(launched, self._provisioner.planned(), classes)
        self._retry_at = None
        if report.nodepool_errors and report.unschedulable:
            away = report.unreachable_nodepools >= set(report.nodepool_errors)
            retry = RETRY_AFTER_UNREACHABLE_SECONDS if away else RETRY_AFTER_NODEPOOL_ERRORS_SECONDS
            self._retry_at = self._ctx.clock.monotonic() + retry
        if report.launched:
            # The round logged each NodeClaim; this is the tally, for debugging.
            log.debug(
                "launched %d NodeClaims for %d pods ($%.4f/h)",
                len(report.launched),
                sum(len(d.pods) for d in report.launched),
                report.hourly_cost,
            )
        return Result(requeue_after=self.interval)
