"""What a scenario run watches: the cluster sampled over virtual time, and every disruption.

Sampling (listing pods, NodeClaims, Nodes and prices every ``sample_every`` virtual seconds)
is enough for curves, but not for counting disruptions: a NodeClaim the disruption controller
marks with a ``DisruptionReason`` condition and deletes between two samples would never be
seen. So the observer also follows the NodeClaims' watch from the start of the run (polled at
each sample, resuming from the last resourceVersion, relisting on 410 as an informer does).
A NodeClaim counts as disrupted for its reason when it is deleted while marked; one still
marked is counted as in flight; one whose mark is withdrawn (the disruption controller rolls
a command back when its replacements fail) is not counted.

Cost is what the controller priced each NodeClaim at: the offering (instance type, zone and
capacity type, the NodeClaim's labels) in its NodePool's inventory as the plugins resolve it
(``resolve_inventory``), once per sample, so prices from AWS, Azure or generic_capi's shape
estimate count as much as a price annotation. A NodeClaim whose offering is not (or no longer)
in the inventory falls back to the price annotation of the scalable resource it waits on or
was bound through (``karpenter.cluster.x-k8s.io/scalable-resource``), and to 0 without one.

At each sample it also replays the NodeClaims' and Events' watches for launches beyond the plan
(pods the scheduler stranded; ``sim.scenario.plans``).

The observer's own requests (those the inventory resolution makes included) are tallied, so
the run can report the API requests the controllers and the timeline made without the
measuring instrument's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.clock import Clock, parse_timestamp
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.kube.resources import (
    MACHINE_DEPLOYMENTS,
    MACHINE_POOLS,
    NODECLAIMS,
    NODES,
    PODS,
    Resource,
)
from karpenter_capi.core.plugin_host import Plugins
from karpenter_capi.core.provisioning.inventory import resolve_inventory
from karpenter_capi.plugins.generic_capi.binding import ANNOTATION_SCALABLE_RESOURCE
from karpenter_capi.plugins.generic_capi.shape import PRICE_ANNOTATION
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.request_counts import WATCH_POLL
from karpenter_capi.sim.scenario.plans import PlanFollower
from karpenter_capi.sim.scenario.result import NODECLAIM_STATES, CapacityRow, Sample

JsonObject = dict[str, Any]


def bound_after(pod: Mapping[str, Any]) -> float | None:
    """Seconds from creation to ``PodScheduled=True``, or ``None`` while unbound."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return None
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            created = pod["metadata"].get("creationTimestamp")
            moved = condition.get("lastTransitionTime")
            if created and moved:
                delta = parse_timestamp(moved) - parse_timestamp(created)
                return max(0.0, delta.total_seconds())
    return None


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _condition_true(obj: Mapping[str, Any], kind: str) -> JsonObject | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


def nodeclaim_state(claim: Mapping[str, Any]) -> str:
    """The latest of ``NODECLAIM_STATES`` a NodeClaim has reached."""
    if claim["metadata"].get("deletionTimestamp"):
        return "deleting"
    for state, condition in (
        ("initialized", NodeClaimConditionType.INITIALIZED),
        ("registered", NodeClaimConditionType.REGISTERED),
        ("launched", NodeClaimConditionType.LAUNCHED),
    ):
        if _condition_true(claim, condition) is not None:
            return state
    return "launching"


def disruption_reason(claim: Mapping[str, Any]) -> str | None:
    """The reason of a ``DisruptionReason=True`` condition (``Empty``, ``Drifted``, ...)."""
    condition = _condition_true(claim, NodeClaimConditionType.DISRUPTION_REASON)
    if condition is None:
        return None
    return str(condition.get("reason") or "Unknown")


class Observer:
    """Samples the cluster, remembers each pod's time to bind and each disrupted NodeClaim."""

    def __init__(
        self, server: InMemoryAPIServer, clock: Clock, plugins: Plugins | None = None
    ) -> None:
        self.server = server
        self.clock = clock
        self.plugins = plugins  # None: price annotations only
        self.start = clock.monotonic()
        self.samples: list[Sample] = []
        self.bound_seconds: dict[str, float] = {}
        self.own_requests: dict[str, int] = {}
        self._disrupted: dict[str, str] = {}  # NodeClaim uid -> reason, deleted while marked
        self._marked: dict[str, str] = {}  # NodeClaim uid -> reason, marked and not deleting
        self._claims_version = server.resource_version
        self._claims: list[JsonObject] = []
        self._prices: dict[str, float] = {}
        # (NodePool, instance type, zone, capacity type) -> price, resolved at most once a sample.
        self._offerings: dict[tuple[str, str, str, str], float] | None = None
        self.plans = PlanFollower(server, self._count)
        """Launches beyond the plan (``sim.scenario.plans``), followed at each sample."""

    # ------------------------------------------------------------------ own requests

    def _count(self, verb: str) -> None:
        self.own_requests[verb] = self.own_requests.get(verb, 0) + 1

    def _list(self, resource: Resource) -> list[JsonObject]:
        self._count("list")
        return self.server.list(resource, shared=True).items

    # ------------------------------------------------------------------- disruptions

    def _note(self, claims: Iterable[Mapping[str, Any]], *, deleted: bool = False) -> None:
        for claim in claims:
            uid = str(claim["metadata"].get("uid"))
            if uid in self._disrupted:
                continue
            reason = disruption_reason(claim)
            if reason is None:
                self._marked.pop(uid, None)  # never marked, or the mark was withdrawn
            elif deleted or claim["metadata"].get("deletionTimestamp"):
                self._disrupted[uid] = reason
                self._marked.pop(uid, None)
            else:
                self._marked[uid] = reason

    def follow_disruptions(self) -> None:
        """Read the NodeClaim events since the last call (or relist if they expired)."""
        self._count(WATCH_POLL)
        stream = self.server.watch(
            NODECLAIMS,
            resource_version=self._claims_version,
            allow_bookmarks=True,
            timeout_seconds=0,
        )
        try:
            for event in stream:
                if event.type == "ERROR":  # history expired: relist
                    listed = self.server.list(NODECLAIMS)
                    self._count("list")
                    present = {str(c["metadata"].get("uid")) for c in listed.items}
                    for uid in [uid for uid in self._marked if uid not in present]:
                        self._disrupted[uid] = self._marked.pop(uid)  # went while marked
                    self._note(listed.items)
                    self._claims_version = listed.resource_version
                    return
                version = event.resource_version
                if version:
                    self._claims_version = version
                if event.type != "BOOKMARK":
                    self._note([event.object], deleted=event.type == "DELETED")
        finally:
            stream.close()

    def disruptions(self) -> dict[str, int]:
        """NodeClaims disrupted (or being disrupted) so far, by reason."""
        counts: dict[str, int] = {}
        for reason in [*self._disrupted.values(), *self._marked.values()]:
            counts[reason] = counts.get(reason, 0) + 1
        return dict(sorted(counts.items()))

    # ------------------------------------------------------------------------ samples

    def _offering_prices(self) -> dict[tuple[str, str, str, str], float]:
        """Each offering's price in the NodePools' inventories, resolved once a sample."""
        if self._offerings is not None:
            return self._offerings
        offerings: dict[tuple[str, str, str, str], float] = {}
        if self.plugins is not None:
            before = self.server.requests.snapshot()
            try:
                inventories = resolve_inventory(self.server, self.plugins)
            except ApiError:  # an injected fault: fall back to the annotations this sample
                inventories = []
            finally:
                for verb, count in self.server.requests.since(before).items():
                    self.own_requests[verb] = self.own_requests.get(verb, 0) + count
            for inventory in inventories:
                for it in inventory.instance_types:
                    for o in it.offerings:
                        key = (inventory.nodepool, it.name, o.zone, o.capacity_type)
                        # Two offerings alike but for their price: the solver takes the cheaper.
                        offerings[key] = min(o.price, offerings.get(key, o.price))
        self._offerings = offerings
        return offerings

    def _price_of(self, claim: Mapping[str, Any]) -> float:
        labels = claim["metadata"].get("labels") or {}
        key = (
            str(labels.get(wellknown.LABEL_NODEPOOL, "")),
            str(labels.get(wellknown.LABEL_INSTANCE_TYPE, "")),
            str(labels.get(wellknown.LABEL_TOPOLOGY_ZONE, "")),
            str(labels.get(wellknown.LABEL_CAPACITY_TYPE, "")),
        )
        if all(key):
            price = self._offering_prices().get(key)
            if price is not None:
                return price
        annotations = claim["metadata"].get("annotations") or {}
        return self._prices.get(annotations.get(ANNOTATION_SCALABLE_RESOURCE, ""), 0.0)

    def _read_prices(self) -> None:
        """``Kind/namespace/name`` of each scalable resource to its annotated hourly price."""
        prices: dict[str, float] = {}
        for resource in (MACHINE_DEPLOYMENTS, MACHINE_POOLS):
            for obj in self._list(resource):
                meta = obj["metadata"]
                value = (meta.get("annotations") or {}).get(PRICE_ANNOTATION)
                if value is None:
                    continue
                try:
                    prices[f"{resource.kind}/{meta['namespace']}/{meta['name']}"] = float(value)
                except ValueError:
                    continue
        self._prices = prices

    def sample(self) -> Sample:
        self.follow_disruptions()
        self.plans.follow()
        pods = [
            p
            for p in self._list(PODS)
            if not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        bound = 0
        for pod in pods:
            seconds = bound_after(pod)
            if seconds is not None:
                bound += 1
                self.bound_seconds.setdefault(str(pod["metadata"]["uid"]), seconds)
        self._read_prices()
        self._offerings = None  # resolved again, on first need, for this sample
        all_claims = self._list(NODECLAIMS)
        self._note(all_claims)
        states = dict.fromkeys(NODECLAIM_STATES, 0)
        for claim in all_claims:
            states[nodeclaim_state(claim)] += 1
        self._claims = [c for c in all_claims if not c["metadata"].get("deletionTimestamp")]
        cost = sum(self._price_of(c) for c in self._claims)
        nodes = self._list(NODES)
        by_type: dict[str, int] = {}
        by_pool: dict[str, int] = {}
        for node in nodes:
            labels = node["metadata"].get("labels") or {}
            instance_type = str(labels.get(wellknown.LABEL_INSTANCE_TYPE) or "-")
            by_type[instance_type] = by_type.get(instance_type, 0) + 1
            pool = str(labels.get(wellknown.LABEL_NODEPOOL) or "-")
            by_pool[pool] = by_pool.get(pool, 0) + 1
        sample = Sample(
            at=round(self.clock.monotonic() - self.start, 3),
            pods_pending=len(pods) - bound,
            pods_bound=bound,
            nodes=len(nodes),
            nodeclaims=len(self._claims),
            cost_per_hour=round(cost, 6),
            nodeclaims_by_state=states,
            disruptions=self.disruptions(),
            nodes_by_instance_type=dict(sorted(by_type.items())),
            nodes_by_nodepool=dict(sorted(by_pool.items())),
        )
        self.samples.append(sample)
        return sample

    def capacity(self) -> list[CapacityRow]:
        """The NodeClaims (not being deleted) of the last sample, by type and capacity type."""
        groups: dict[tuple[str, str, float], int] = {}
        for claim in self._claims:
            labels = claim["metadata"].get("labels") or {}
            key = (
                str(labels.get(wellknown.LABEL_INSTANCE_TYPE) or "-"),
                str(labels.get(wellknown.LABEL_CAPACITY_TYPE) or "-"),
                self._price_of(claim),
            )
            groups[key] = groups.get(key, 0) + 1
        rows = [
            CapacityRow(instance_type=t, capacity_type=c, count=n, price_per_hour=p)
            for (t, c, p), n in groups.items()
        ]
        return sorted(rows, key=lambda r: (-r.count * r.price_per_hour, r.instance_type))
