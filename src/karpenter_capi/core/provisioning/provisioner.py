"""One provisioning round: pending pods in, NodeClaims created, Events on every pod.

A round reads the cluster once (:mod:`.state`), resolves every NodePool's inventory through the
plugins, runs the solver, and creates the NodeClaims it proposes, as upstream Karpenter's
provisioner does: ``generateName`` ``<nodepool>-``, the NodePool's labels and the requirements'
single values as labels, the requirements with ``node.kubernetes.io/instance-type In [...]``
and ``karpenter.sh/capacity-type In [...]``, the resource requests, the NodePool's taints and
startup taints, an owner reference to the NodePool and its template hash. Limits are checked
again, against a fresh read, just before each creation, because another replica or a user may
have added capacity since the solve started.

A NodeClaim the API refuses (invalid, forbidden, conflicting) is that NodePool's problem only:
the refusal is said on the NodePool and its pods and the round goes on with the others; an API
that is away or busy fails the round, which is retried as a whole.

Pods placed on a NodeClaim are remembered (Karpenter's "nominated" pods): the next round sends
them back to the same claim first, so a claim still launching is not asked for twice; pods
placed on its Node once it registered are remembered the same way, so a plan (and each pod's
``status.nominatedNodeName``) holds while the pod still fits there. The pods a
claim was launched for are also written on it (``karpenter.cluster.x-k8s.io/nominated-pods``),
so a restarted controller rebuilds those nominations from the API instead of packing the
pending pods afresh onto in-flight capacity and launching again for what does not fit.

Each round says what it decided in upstream's words (``found provisionable pod(s)``, ``computed
new nodeclaim(s) to fit pod(s)``, ``created nodeclaim``, ``could not schedule pod``), and what
the re-packing stage made of greedy's plan (``re-packing outcome``: saved so much, not cheaper,
refused, stopped by its budget), at INFO only when that differs from what the previous round
said: a pod that stays pending for an hour is reported once, then at DEBUG.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import ApiError, refused_by_api
from karpenter_capi.core.kube.events import (
    NOMINATION_BURST,
    NOMINATION_QPS,
    NORMAL,
    WARNING,
    EventRecorder,
)
from karpenter_capi.core.kube.ratelimit import TokenBucket
from karpenter_capi.core.kube.resources import NODECLAIMS
from karpenter_capi.core.observability.logs import first, ref
from karpenter_capi.core.observability.metrics import Metrics
from karpenter_capi.core.plugin_host import Plugins
from karpenter_capi.core.provisioning.daemonsets import UnreadableDaemonSets
from karpenter_capi.core.provisioning.inventory import NodePoolInventory, Stores, resolve_inventory
from karpenter_capi.core.provisioning.nodeclaims import log_created, nodeclaim_body, template_hashes
from karpenter_capi.core.provisioning.nodepools import nodepool_option, nodepool_usage
from karpenter_capi.core.provisioning.pending import is_provisionable
from karpenter_capi.core.provisioning.plans import finish_plans, missing_claims, stamp_plan
from karpenter_capi.core.provisioning.report import (
    LaunchDecision,
    ProvisioningReport,
    launch_decision,
)
from karpenter_capi.core.provisioning.state import (
    ClusterSnapshot,
    ParsedCluster,
    existing_nodes,
    moving_pods,
    persisted_nominations,
    unreplaced_pods,
)
from karpenter_capi.core.provisioning.together import CREATES, EVENTS, together
from karpenter_capi.core.provisioning.unseen import UnseenClaims, outcome_unknown
from karpenter_capi.core.scheduling import packing
from karpenter_capi.core.scheduling.daemons import DaemonOverhead
from karpenter_capi.core.scheduling.packing_memo import PackingMemo
from karpenter_capi.core.scheduling.packing_summary import summarize
from karpenter_capi.core.scheduling.podspec import PodSpecs, missing_claim_reason, pod_key
from karpenter_capi.core.scheduling.solver import (
    DEFAULT_MAX_INSTANCE_TYPES,
    DEFAULT_TIMEOUT_SECONDS,
    Solver,
)
from karpenter_capi.core.scheduling.solver_io import ExistingNode, NodePoolOption, ProposedNodeClaim
from karpenter_capi.core.values.resources import ResourceList

log = logging.getLogger(__name__)


def _as_floats(resources: ResourceList) -> dict[str, float]:
    """Resource quantities in their base unit (cores, bytes, count), as the gauges report."""
    return {name: resources.milli(name) / 1000 for name in resources}


class Provisioner:
    """Runs provisioning rounds against one cluster through the enabled plugins."""

    def __init__(
        self,
        client: KubeClient,
        plugins: Plugins,
        clock: Clock,
        *,
        recorder: EventRecorder | None = None,
        max_instance_types: int = DEFAULT_MAX_INSTANCE_TYPES,
        solve_timeout: float = DEFAULT_TIMEOUT_SECONDS,
        packing_budget: float = packing.DEFAULT_BUDGET_SECONDS,
        dry_run: bool = False,
        metrics: Metrics | None = None,
        plans_nominated: bool = False,
        create_concurrency: int = 1,
        pod_specs: PodSpecs | None = None,
        packing_memo: PackingMemo | None = None,
        stores: Stores | None = None,
    ) -> None:
        self._client = client
        self._stores = stores  # NodePools and NodeClasses: caches, or the API (``inventory``)
        # Parsed pods and bound-pod sums, kept across rounds (``pod_specs`` may be shared).
        # Re-packing outcomes too: until a round's pods bind, each round re-packs the same claims.
        self._bound = ParsedCluster(pod_specs, packing_memo)
        # Whether planned pods are nominated to their nodes (``nominations.py``), so that
        # kube-scheduler realizes the plan instead of following its own order.
        self.plans_nominated = plans_nominated
        # NodeClaims of a round created at once (``_launch_all``); 1 keeps the creates in the
        # plan's order, as a simulation needs for names that repeat run after run.
        self._create_concurrency = create_concurrency
        self._dry_run = dry_run
        self._metrics = metrics
        self._plugins = plugins
        self._clock = clock
        self._recorder = recorder or EventRecorder(client, clock)
        self._daemonsets = UnreadableDaemonSets(self._recorder, dry_run=dry_run)
        self._nomination_events = TokenBucket(NOMINATION_QPS, NOMINATION_BURST, clock)
        self._max_instance_types = max_instance_types
        self._solve_timeout = solve_timeout
        self._packing_budget = packing_budget  # seconds for re-packing; 0 disables it
        # Like Karpenter's cluster state: the pods each NodeClaim was launched (or later
        # counted) for. Those it was launched for are also on the claim, where a restarted
        # process finds them (``persisted_nominations``); later countings live here only.
        self._nominations: dict[str, frozenset[str]] = {}
        self.unseen = UnseenClaims()  # created, and not yet in the caches a round reads
        # When pending pods were last counted on each node or NodeClaim (clock.monotonic()):
        # disruption leaves those alone for a while, or it would take what provisioning relies on.
        self._nominated_at: dict[str, float] = {}
        # What the last round said at INFO, so an unchanged round says it at DEBUG.
        self._said: dict[str, Hashable] = {}
        self._said_unschedulable: dict[str, str] = {}
        # Pending pod key -> the NodeClaim or node the last round placed it on; None before
        # the first round. What ``nominations.NominationController`` nominates.
        self._planned: dict[str, str] | None = None
        # id(pod) -> (that pod, its key if provisionable, else None), for ``pending_pods``; the
        # pod is kept so its id cannot be taken by another object.
        self._provisionable: dict[int, tuple[Mapping[str, Any], str | None]] = {}

    def _level(self, topic: str, value: Hashable) -> int:
        """INFO when ``value`` differs from what ``topic`` said last round, else DEBUG."""
        level = logging.DEBUG if self._said.get(topic) == value else logging.INFO
        self._said[topic] = value
        return level

    def nominated_within(self, seconds: float) -> frozenset[str]:
        """Nodes and NodeClaims pending pods were counted on in the last ``seconds``."""
        horizon = self._clock.monotonic() - seconds
        # A copy first: the provisioning thread may be adding to the dict meanwhile.
        return frozenset(name for name, at in list(self._nominated_at.items()) if at >= horizon)

    def nominations(self) -> dict[str, frozenset[str]]:
        """NodeClaim (or node) name -> keys of the pending pods it was launched or counted for."""
        return dict(list(self._nominations.items()))

    def planned(self) -> dict[str, str] | None:
        """Pending pod key -> the NodeClaim or node the last round placed it on (None before
        the first round)."""
        return None if (planned := self._planned) is None else dict(planned)

    def pending_pods(self, snapshot: ClusterSnapshot) -> list[Mapping[str, Any]]:
        """The provisionable pods, in the snapshot's order (``pending``'s first half)."""
        return self.pending(snapshot)[0]

    def pending(self, snapshot: ClusterSnapshot) -> tuple[list[Mapping[str, Any]], list[str]]:
        """The provisionable pods, in the snapshot's order, and their ``pod_key``s. Asked at
        every look of a changed cluster (twice a second through a scale-up): each pod's answer
        is kept while the snapshot holds that very object, which the caches replace on each
        new version."""
        known = self._provisionable
        kept: dict[int, tuple[Mapping[str, Any], str | None]] = {}
        pending, keys = [], []
        for pod in snapshot.pods:
            entry = known.get(id(pod))
            if entry is None or entry[0] is not pod:
                entry = (pod, pod_key(pod) if is_provisionable(pod) else None)
            kept[id(pod)] = entry
            if entry[1] is not None:
                pending.append(pod)
                keys.append(entry[1])
        self._provisionable = kept
        return pending, keys

    def reconcile(self, snapshot: ClusterSnapshot | None = None) -> ProvisioningReport:
        """One round over ``snapshot`` (read from the API when not given)."""
        report = ProvisioningReport()
        snapshot = snapshot or ClusterSnapshot.read(self._client)
        self._bound.specs.new_round()
        provisionable = self.pending_pods(snapshot)
        report.pending = len(provisionable)
        # Pods no node can help (their claim is missing): told so, never launched for.
        blocked = {pod_key(p): why for p in provisionable if (why := missing_claim_reason(p))}
        pending = [p for p in provisionable if pod_key(p) not in blocked]
        unreplaced = {pod_key(p) for p in unreplaced_pods(snapshot)}
        if not provisionable and not unreplaced:
            self._said.clear()
            self._said_unschedulable = {}
            self._planned = {}
            return report
        usable, options = self._usable_pools(snapshot, report)
        daemons = DaemonOverhead(snapshot.daemonsets)  # an unreadable one is left out, and said
        self._daemonsets.report(daemons.unreadable)
        nominations = {**persisted_nominations(snapshot), **self._nominations}
        # NodeClaims of a plan a killed process did not finish creating: created as planned,
        # their pods kept out of this round's solve (``plans.py``).
        resumed = finish_plans(
            missing_claims(snapshot.nodeclaims),
            {pod_key(p): p for p in pending},
            frozenset().union(*nominations.values()),
            options,
            lambda option, pods: self._solver([option], snapshot, [], daemons, repack=False).solve(
                pods
            ),
        )
        resumed_keys = {pod_key(p) for claim, _ in resumed for p in claim.pods}
        nodes = existing_nodes(snapshot, usable, nominations, self._bound)
        solver = self._solver(options, snapshot, nodes, daemons)
        # Pods of nodes already going away will need room too (upstream counts them): placing
        # them first keeps new pods from taking what a disruption replacement was launched for.
        moving = moving_pods(snapshot)
        started = self._clock.monotonic()
        result = solver.solve(moving + [p for p in pending if pod_key(p) not in resumed_keys])
        seconds = self._clock.monotonic() - started
        keys = sorted(pod_key(p) for p in pending)
        log.log(
            self._level("pending", tuple(keys)),
            "found provisionable pod(s)",
            extra={"Pods": first(keys), "pod-count": len(keys), "duration": f"{seconds:.3f}s"},
        )
        packed = report.packing = summarize(solver.packing_outcomes)
        if packed is not None:
            log.log(
                self._level("packing", (packed.outcome, packed.reason)),
                "re-packing outcome",
                extra={
                    "outcome": packed.outcome,
                    "saved": f"${packed.saved:.4f}/h",
                    "reason": packed.reason,
                },
            )
        self._observe(seconds, options)
        report.timed_out = result.timed_out
        claim_names = {str(c["metadata"]["name"]) for c in snapshot.nodeclaims}
        claim_of_node = {
            str(node_name): str(c["metadata"]["name"])
            for c in snapshot.nodeclaims
            if (node_name := (c.get("status") or {}).get("nodeName"))
        }
        live = {str(c["metadata"]["name"]) for c in snapshot.nodeclaims}
        live |= {str(n["metadata"]["name"]) for n in snapshot.nodes}
        self._nominations = {n: pods for n, pods in self._nominations.items() if n in live}
        nominated_now = self._clock.monotonic()
        self._nominated_at = {  # an hour is far longer than any caller's window
            n: at for n, at in self._nominated_at.items() if at >= nominated_now - 3600
        }
        for node_name in result.existing:
            self._nominated_at[node_name] = nominated_now
        moving_keys = {pod_key(p) for p in moving}
        held = moving_keys - unreplaced  # a command replaces these; upstream launches for the rest
        for node_name, pods in result.existing.items():
            waiting = sum(1 for p in pods if pod_key(p) not in moving_keys)
            report.placed.update((pod_key(p), node_name) for p in pods if pod_key(p) not in held)
            if node_name in claim_names:
                report.in_flight_pods += waiting
                self._nominations[node_name] = frozenset(map(pod_key, pods))
            else:
                report.existing_pods += waiting
                # A NodeClaim's registered Node keeps the pods counted on it, as the claim did
                # before it registered: the next round sends them back there first, so a plan
                # (and each pod's nomination) holds until it must change.
                holder = claim_of_node.get(node_name)
                if holder is not None:
                    self._nominations[holder] = frozenset(map(pod_key, pods))
        raw_pools = {inventory.nodepool: inventory for inventory in usable}
        wanted = []
        for claim in result.new_nodeclaims:
            claim.pods = [p for p in claim.pods if pod_key(p) not in held]
            if claim.pods:
                wanted.append(claim)
        decision = tuple(
            sorted((c.nodepool.name, tuple(sorted(pod_key(p) for p in c.pods))) for c in wanted)
        )
        computed = self._level("computed", decision)
        if wanted:
            log.log(
                computed,
                "computed new nodeclaim(s) to fit pod(s)",
                extra={"nodeclaims": len(wanted), "pods": sum(len(c.pods) for c in wanted)},
            )
        if resumed:
            log.info(
                "finishing an interrupted plan",
                extra={
                    "plans": first(sorted({stamp.split("/")[0] for _, stamp in resumed})),
                    "nodeclaims": len(resumed),
                    "pods": len(resumed_keys),
                },
            )
            self._launch_all(
                [claim for claim, _ in resumed],
                raw_pools,
                report,
                logging.INFO,
                stamps=[stamp for _, stamp in resumed],
            )
        self._launch_all(wanted, raw_pools, report, computed)
        self._planned = {
            **report.placed,
            **{key: launched.nodeclaim for launched in report.launched for key in launched.pods},
        }
        for key, reason in result.unschedulable.items():
            if key not in moving_keys:
                report.unschedulable.setdefault(key, reason)
        report.unschedulable.update(blocked)
        by_key = {pod_key(p): p for p in provisionable}
        said = self._said_unschedulable
        self._said_unschedulable = dict(report.unschedulable)
        for key, reason in sorted(report.unschedulable.items()):
            namespace, _, name = key.partition("/")
            log.log(
                logging.DEBUG if said.get(key) == reason else logging.INFO,
                "could not schedule pod",
                extra={"Pod": ref(name, namespace), "error": reason},
            )
            if not self._dry_run:
                self._recorder.record(by_key[key], WARNING, "FailedScheduling", reason)
        return report

    def _usable_pools(
        self, snapshot: ClusterSnapshot, report: ProvisioningReport
    ) -> tuple[list[NodePoolInventory], list[NodePoolOption]]:
        """The NodePools pods may land on, and those of them a round may launch for.

        A NodePool whose inventory or values are invalid is reported and marked, and only it
        is left out. A static NodePool keeps its own node count: pods may land on its nodes
        (``usable`` still gives its launching NodeClaims their size) but no round launches for it.
        """
        usable = []
        options = []
        for inventory in resolve_inventory(self._client, self._plugins, stores=self._stores):
            if inventory.error is None:
                try:
                    option = nodepool_option(inventory, snapshot)
                except ValueError as error:  # a value no validation caught: this pool only
                    inventory.error = f"invalid NodePool: {error}"
            if inventory.error:
                report.nodepool_errors[inventory.nodepool] = inventory.error
                if inventory.unreachable:
                    report.unreachable_nodepools.add(inventory.nodepool)
                self._unusable(inventory.raw, inventory.nodepool, inventory.error)
                continue
            usable.append(inventory)
            if not (inventory.model is not None and inventory.model.is_static):
                options.append(option)
        return usable, options

    def _observe(self, seconds: float, options: Sequence[NodePoolOption]) -> None:
        """The round's scheduling time and each NodePool's usage and limits, as metrics."""
        if self._metrics is None:
            return
        self._metrics.observe_scheduling(seconds)
        for option in options:
            self._metrics.set_nodepool_usage(option.name, _as_floats(option.usage))
            if option.limits is not None:
                self._metrics.set_nodepool_limits(option.name, _as_floats(option.limits))

    def _solver(
        self,
        options: Sequence[NodePoolOption],
        snapshot: ClusterSnapshot,
        nodes: Sequence[ExistingNode],
        daemons: DaemonOverhead,
        *,
        repack: bool = True,
    ) -> Solver:
        return Solver(
            options,
            existing_nodes=nodes,
            daemonsets=daemons,
            namespaces=snapshot.namespaces,
            max_instance_types=self._max_instance_types,
            clock=self._clock,
            timeout_seconds=self._solve_timeout,
            packing_budget=self._packing_budget if repack else 0,
            plans_nominated=self.plans_nominated,
            pod_specs=self._bound.specs,
            packing_memo=self._bound.packing,
        )

    def _unusable(self, raw_pool: Mapping[str, Any], nodepool: str, why: str) -> None:
        """A NodePool this round cannot use: a WARNING while ``why`` is new, and an Event."""
        level = self._level(f"nodepool-error/{nodepool}", why)
        log.log(
            logging.WARNING if level == logging.INFO else logging.DEBUG,
            "NodePool %s: %s",
            nodepool,
            why,
        )
        if not self._dry_run:
            self._recorder.record(raw_pool, WARNING, "NodePoolNotReady", why)

    def _refused(self, raw_pool: Mapping[str, Any], nodepool: str, error: ApiError) -> str:
        """Say on the NodePool (an Event, a WARNING while the message is new) that the API
        refused its NodeClaim; the message, for its pods."""
        message = error.message
        generated = str(error.details.get("name") or "")
        if generated.startswith(f"{nodepool}-"):
            # The random suffix differs on every attempt; without it the refusal reads the
            # same each round, so its Events fold into one and it is logged once.
            message = message.replace(generated, f"{nodepool}-*")
        why = f"could not create a NodeClaim: {message}"
        level = self._level(f"nodeclaim-refused/{nodepool}", why)
        log.log(
            logging.WARNING if level == logging.INFO else logging.DEBUG,
            "could not create nodeclaim",
            extra={"NodePool": ref(nodepool), "error": why},
        )
        self._recorder.record(raw_pool, WARNING, "NodeClaimNotCreated", why)
        return why

    def _limits_exceeded(
        self,
        claim: ProposedNodeClaim,
        instance_types: Sequence[Any],
        nodeclaims: Sequence[JsonObject],
    ) -> str | None:
        """Why creating ``claim`` would break its NodePool's limits, with ``nodeclaims``
        (read afresh, plus the round's claims let through before it) already counted."""
        limits = claim.nodepool.limits
        if limits is None:
            return None
        fresh = ClusterSnapshot(pods=[], nodes=[], nodeclaims=list(nodeclaims), daemonsets=[])
        usage = nodepool_usage(claim.nodepool.name, fresh, {it.name: it for it in instance_types})
        largest = ResourceList.from_milli({"nodes": 1000})
        for instance_type in claim.instance_types:
            largest = largest.max_merge(instance_type.capacity)
        exceeded = usage.add(largest).exceeded_resources(limits)
        if exceeded:
            return f"limits would be exceeded ({', '.join(sorted(exceeded))})"
        return None

    def _launch_all(
        self,
        wanted: Sequence[ProposedNodeClaim],
        raw_pools: Mapping[str, Any],
        report: ProvisioningReport,
        level: int,
        *,
        stamps: Sequence[str] | None = None,
    ) -> None:
        """Create the round's NodeClaims, then say and record each, in the plan's order.

        The plan is written on them first (``plans.stamp_plan``), or with ``stamps`` (one per
        claim) they are an interrupted plan's missing NodeClaims, each with its place in it.

        Over a real API a create is a round-trip: one by one, with each claim's Events in
        between, a 20-claim round spread its nodes over tens of seconds, and each resource's
        launch raised its replicas once per claim instead of once for all. So the claims are
        created together, at most ``create_concurrency`` at a time, then said, and the Events
        follow once all exist. NodePool limits are checked first, claim after claim, against
        one fresh read of the NodeClaims plus the claims this round already let through, as
        creating them one by one would.
        """
        accepted: list[tuple[ProposedNodeClaim, JsonObject]] = []
        listed: list[JsonObject] | None = None
        hashes = template_hashes(raw_pools[c.nodepool.name].model for c in wanted)
        for number, claim in enumerate(wanted):
            inventory = raw_pools[claim.nodepool.name]
            body = nodeclaim_body(
                inventory.raw, claim, template_hash=hashes.get(inventory.nodepool)
            )
            if stamps is not None:
                body["metadata"]["annotations"][wellknown.ANNOTATION_PLAN] = stamps[number]
            if claim.nodepool.limits is not None:
                if listed is None:
                    listed = list(self._client.list(NODECLAIMS).items)
                why = self._limits_exceeded(
                    claim, inventory.instance_types, [*listed, *(b for _, b in accepted)]
                )
                if why is not None:
                    for pod in claim.pods:
                        report.unschedulable[pod_key(pod)] = (
                            f"NodePool {claim.nodepool.name}: {why}"
                        )
                    continue
            accepted.append((claim, body))
        if stamps is None:
            stamp_plan(accepted, self._clock.now().isoformat())
        if self._dry_run:
            report.launched.extend(self._launched(claim, None, level) for claim, _ in accepted)
            return
        failure: ApiError | None = None
        launched: list[tuple[ProposedNodeClaim, str]] = []
        for claim, outcome in zip(
            (claim for claim, _ in accepted),
            self._create_all([b for _, b in accepted]),
            strict=True,
        ):
            if outcome is None:
                continue  # not tried: the API failed the round before
            if isinstance(outcome, ApiError):
                if not refused_by_api(outcome):
                    failure = failure or outcome
                    continue
                raw = raw_pools[claim.nodepool.name].raw
                why = self._refused(raw, claim.nodepool.name, outcome)
                report.nodepool_errors[claim.nodepool.name] = why
                for pod in claim.pods:
                    report.unschedulable[pod_key(pod)] = f"NodePool {claim.nodepool.name}: {why}"
                continue
            self._said.pop(f"nodeclaim-refused/{claim.nodepool.name}", None)
            report.launched.append(self._launched(claim, outcome, level))
            launched.append((claim, report.launched[-1].nodeclaim))
        self._nominate(launched)
        if failure is not None:
            raise failure  # the round is retried as a whole; what was created is remembered

    def _create_all(self, bodies: Sequence[JsonObject]) -> list[JsonObject | ApiError | None]:
        """Each body's created NodeClaim or the API's error; ``None`` for a body not tried.

        With ``create_concurrency`` 1 in the plan's order, stopping at an API that is away or
        busy (a simulation needs the server to name the claims in the same order every run);
        otherwise the first, then the others together, at most ``create_concurrency`` in
        flight: this thread and the process's shared create threads (``together.py``), which
        outlive the round, so no round waits for threads of its own to start."""
        if self._create_concurrency <= 1 or len(bodies) <= 1:
            outcomes: list[JsonObject | ApiError | None] = []
            for body in bodies:
                failed = any(isinstance(o, ApiError) and not refused_by_api(o) for o in outcomes)
                outcomes.append(None if failed else self._create(body))
            return outcomes
        # The first carries the rest of the plan: created alone first, so that no other
        # NodeClaim of the round exists without it (``plans.py``).
        carrier = self._create(bodies[0])
        if isinstance(carrier, ApiError) and not refused_by_api(carrier):
            return [carrier, *(None for _ in bodies[1:])]
        return [carrier, *together(CREATES, self._create, bodies[1:], self._create_concurrency)]

    def _create(self, body: JsonObject) -> JsonObject | ApiError:
        try:
            return self._client.create(NODECLAIMS, body)
        except ApiError as error:
            if outcome_unknown(error):
                self.unseen.lost()  # it may exist all the same: the next round lists first
            return error

    def _launched(
        self, claim: ProposedNodeClaim, created: JsonObject | None, level: int = logging.INFO
    ) -> LaunchDecision:
        """Remember, say and record a created claim (``None``: a dry run's, said at ``level``,
        DEBUG when the round decided the same as the last one)."""
        keys = tuple(sorted(pod_key(p) for p in claim.pods))
        if created is None:
            log_created("(dry run)", claim, dry_run=True, level=level)
            return launch_decision("(dry run)", claim, keys)
        name = str(created["metadata"]["name"])
        self.unseen.created(created)
        if self._metrics is not None:
            self._metrics.nodeclaim_created(claim.nodepool.name)
        self._nominations[name] = frozenset(keys)
        self._nominated_at[name] = self._clock.monotonic()
        log_created(name, claim)
        return launch_decision(name, claim, keys)

    def _nominate(self, launched: Sequence[tuple[ProposedNodeClaim, str]]) -> None:
        """Launched pods' ``Nominated`` Events, once every claim of the round is created and
        said, ``create_concurrency`` at a time; as upstream, those past the shared bucket
        (``NOMINATION_QPS``) are dropped: the plan is on the NodeClaims, the Events only tell
        a user reading ``kubectl describe``, and 1,000 of them cost the round seconds."""
        events = [
            (pod, f"Pod should schedule on: nodeclaim/{name}")
            for claim, name in launched
            for pod in claim.pods
            if self._nomination_events.try_accept()
        ]

        def record(event: tuple[Mapping[str, Any], str]) -> None:
            self._recorder.record(event[0], NORMAL, "Nominated", event[1])

        if self._create_concurrency <= 1 or len(events) <= 1:
            for event in events:
                record(event)
            return
        together(EVENTS, record, events, self._create_concurrency)
