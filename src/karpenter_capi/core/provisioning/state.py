"""The cluster as the solver needs to see it, read from the API in one pass.

Nodes and NodeClaims still launching become :class:`ExistingNode` values, NodePools with their
resolved inventories become :class:`NodePoolOption` values, and what each NodePool's machines
already count against its limits is added up. Kept apart from the provisioner so the
consolidation simulation (which asks "could these pods go elsewhere?") reads the same view.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.resources import (
    DAEMONSETS,
    NAMESPACES,
    NODECLAIMS,
    NODES,
    PODS,
    Resource,
)
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.provisioning.nodesum import NodeSum
from karpenter_capi.core.scheduling.packing_memo import PackingMemo
from karpenter_capi.core.scheduling.podspec import PodObject, PodSpec, PodSpecs
from karpenter_capi.core.scheduling.solver_io import ExistingNode
from karpenter_capi.core.values.requirements import Requirement, Requirements
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.core.values.taints import Taint

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "NoSchedule")
EPHEMERAL_TAINT_KEYS = frozenset(
    {
        wellknown.TAINT_UNREGISTERED_KEY,
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.cloudprovider.kubernetes.io/uninitialized",
    }
)
"""Taints a node we launched carries only until it is initialized."""
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
FINISHED_PHASES: Final = ("Succeeded", "Failed")
"""Phases of a pod that no longer runs: it holds nothing and moves nowhere."""
UNMOVED_OWNER_KINDS: Final = ("DaemonSet", "Node")
"""Owners whose pods are not rescheduled when their node goes (DaemonSet and static pods)."""
Parses = tuple[Sequence[tuple[str, str]], Sequence[PodSpec]]
"""A node's bound pods' ``(uid, resourceVersion)`` and parses, one for one with them."""
_NONE: frozenset[str] = frozenset()  # one for every node nothing is nominated to


def has_disrupted_taint(node: Mapping[str, Any]) -> bool:
    """Whether a node carries ``karpenter.sh/disrupted`` (a disruption command or a drain)."""
    return any(
        t.get("key") == wellknown.TAINT_DISRUPTED_KEY
        for t in (node.get("spec") or {}).get("taints") or []
    )


def is_reschedulable(pod: PodObject) -> bool:
    """A pod that must find another node if its node goes (upstream ``IsReschedulable``)."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
        return False
    if MIRROR_POD_ANNOTATION in (meta.get("annotations") or {}):
        return False
    owners = meta.get("ownerReferences") or []
    return not any(ref.get("kind") in UNMOVED_OWNER_KINDS for ref in owners)


def is_interrupted(claim: Mapping[str, Any]) -> bool:
    """Whether the cloud announced it will take the NodeClaim's machine (``core.interruption``)."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    return wellknown.ANNOTATION_INTERRUPTION in annotations


def unreplaced_nodes(snapshot: ClusterSnapshot) -> frozenset[str]:
    """Nodes going away that no disruption command launches replacements for: deleting, whose
    NodeClaim is deleting, or interrupted. Upstream's provisioner launches for their pods
    (``Provisioner.Schedule``: the pods of deleting nodes), before they are evicted."""
    names = {
        str(n["metadata"]["name"])
        for n in snapshot.nodes
        if (n.get("metadata") or {}).get("deletionTimestamp")
    }
    for claim in snapshot.nodeclaims:
        node_name = (claim.get("status") or {}).get("nodeName")
        if node_name and (
            (claim.get("metadata") or {}).get("deletionTimestamp") or is_interrupted(claim)
        ):
            names.add(str(node_name))
    return frozenset(names)


def unreplaced_pods(snapshot: ClusterSnapshot) -> list[PodObject]:
    """The pods of ``unreplaced_nodes`` that a controller will recreate once evicted, unbound:
    what provisioning launches for before the drain (a bare pod is gone once evicted)."""
    return [p for p in moving_pods(snapshot, unreplaced_nodes(snapshot)) if is_recreated(p)]


def is_recreated(pod: PodObject) -> bool:
    """Whether a controller (a ReplicaSet, a StatefulSet, a Job) makes the pod again if it goes."""
    owners = (pod.get("metadata") or {}).get("ownerReferences") or ()
    return any(ref.get("controller") for ref in owners)


def disrupting_nodes(snapshot: ClusterSnapshot) -> frozenset[str]:
    """Nodes already going away: tainted ``karpenter.sh/disrupted`` (a command under way, a
    drain), deleting, whose NodeClaim is deleting, or interrupted. Their pods will need room
    elsewhere."""
    tainted = {str(n["metadata"]["name"]) for n in snapshot.nodes if has_disrupted_taint(n)}
    return frozenset(tainted) | unreplaced_nodes(snapshot)


def unbound(pod: PodObject) -> PodObject:
    """The pod as a solver must see it when it has to move: not on any node yet."""
    spec = dict(pod.get("spec") or {})
    spec.pop("nodeName", None)
    return {**pod, "spec": spec}


def moving_pods(snapshot: ClusterSnapshot, going: frozenset[str] | None = None) -> list[PodObject]:
    """The reschedulable pods of nodes already going away (or of ``going``), unbound."""
    going = disrupting_nodes(snapshot) if going is None else going
    if not going:
        return []  # the common case, at every look: no pod to walk
    return [
        unbound(p)
        for p in snapshot.pods
        if (p.get("spec") or {}).get("nodeName") in going and is_reschedulable(p)
    ]


@dataclass
class ClusterSnapshot:
    """Everything one provisioning round reads, listed once."""

    pods: list[PodObject]
    nodes: list[Mapping[str, Any]]
    nodeclaims: list[Mapping[str, Any]]
    daemonsets: list[Mapping[str, Any]]
    namespaces: dict[str, Mapping[str, str]] = field(default_factory=dict)

    @classmethod
    def from_stores(
        cls, stores: Callable[[Resource], Iterable[Mapping[str, Any]]]
    ) -> ClusterSnapshot:
        """The same view from informer caches (``stores(resource)`` lists one resource)."""
        return cls(
            pods=list(stores(PODS)),
            nodes=list(stores(NODES)),
            nodeclaims=list(stores(NODECLAIMS)),
            daemonsets=list(stores(DAEMONSETS)),
            namespaces={
                str(ns["metadata"]["name"]): dict(ns["metadata"].get("labels") or {})
                for ns in stores(NAMESPACES)
            },
        )

    @classmethod
    def read(cls, client: KubeClient) -> ClusterSnapshot:
        return cls(
            pods=list(client.list(PODS).items),
            nodes=list(client.list(NODES).items),
            nodeclaims=list(client.list(NODECLAIMS).items),
            daemonsets=list(client.list(DAEMONSETS).items),
            namespaces={
                str(ns["metadata"]["name"]): dict(ns["metadata"].get("labels") or {})
                for ns in client.list(NAMESPACES).items
            },
        )


def persisted_nominations(snapshot: ClusterSnapshot) -> dict[str, frozenset[str]]:
    """NodeClaim name -> the pods it was launched for, as written on it at creation.

    What a controller that has just started knows of its predecessor's plans: without it, the
    pending pods would be packed afresh onto the in-flight claims, first-fit, and whatever that
    packing could not fit (the plan's own was better) launched for again.
    """
    found: dict[str, frozenset[str]] = {}
    for claim in snapshot.nodeclaims:
        meta = claim.get("metadata") or {}
        value = (meta.get("annotations") or {}).get(wellknown.ANNOTATION_NOMINATED_PODS)
        if value and isinstance(value, str) and not meta.get("deletionTimestamp"):
            found[str(meta["name"])] = frozenset(k for k in value.split(",") if k)
    return found


def _is_active(pod: PodObject) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in FINISHED_PHASES


def taints_of(items: Iterable[Mapping[str, Any]] | None) -> tuple[Taint, ...]:
    return tuple(Taint.from_dict(t) for t in items or ())


def claim_instance_types(claim: Mapping[str, Any]) -> list[str]:
    for requirement in (claim.get("spec") or {}).get("requirements") or []:
        key, operator = requirement.get("key"), requirement.get("operator")
        if key == wellknown.LABEL_INSTANCE_TYPE and operator == "In":
            return [str(v) for v in requirement.get("values") or []]
    return []


def _claim_labels(claim: Mapping[str, Any]) -> dict[str, str]:
    """The labels a claim's node will have: its own labels and single-valued requirements."""
    spec = claim.get("spec") or {}
    requirements = Requirements.from_dicts(spec.get("requirements") or [])
    labels = dict((claim.get("metadata") or {}).get("labels") or {})
    labels.update(requirements.labels())
    labels.setdefault(wellknown.LABEL_HOSTNAME, str(claim["metadata"]["name"]))
    return labels


V = TypeVar("V")


class _ByNode(Generic[V]):
    """Values by node name, each with the version of what it was made from (``found`` only
    while that is the same). Two dicts, not a pair per node: a pair holding a value is an
    object the cyclic collector walks, a version of strings alone it stops tracking."""

    __slots__ = ("values", "versions")

    def __init__(self) -> None:
        self.values: dict[str, V] = {}
        self.versions: dict[str, object] = {}

    def found(self, name: str, version: object) -> V | None:
        value = self.values.get(name)
        return value if value is not None and self.versions[name] == version else None

    def put(self, name: str, version: object, value: V) -> None:
        self.values[name], self.versions[name] = value, version

    def forget(self, name: str) -> None:
        self.values.pop(name, None)
        self.versions.pop(name, None)

    def keep_only(self, keep: set[str]) -> None:
        for name in [n for n in self.values if n not in keep]:
            self.forget(name)


class ParsedCluster:
    """What rounds read of the cluster, kept across them: parsed pods (``specs``), each node's
    labels as requirements and its allocatable, and what the pods bound to each node request;
    and what they decided that depends on nothing else (``packing``, re-packing outcomes).

    Summing every bound pod of every node each round was most of a round's work in a large
    cluster where little changes; here a node's total changes only by the pods that came, went
    or changed (a new ``resourceVersion``) since the last round. Pods without a uid and a
    ``resourceVersion`` (hand-made ones) are summed afresh each time.
    """

    def __init__(self, specs: PodSpecs | None = None, packing: PackingMemo | None = None) -> None:
        self.specs = specs if specs is not None else PodSpecs()
        self.packing = packing if packing is not None else PackingMemo()
        """Re-packing outcomes: a round (or a pass's simulation) that meets the same packing
        problem again gets the kept outcome (``packing_memo``)."""
        self._nodes: dict[str, NodeSum] = {}
        self._labels: _ByNode[Requirements] = _ByNode()
        self._allocatable: _ByNode[ResourceList] = _ByNode()
        self._existing: _ByNode[ExistingNode] = _ByNode()
        # One label's requirement, shared by every node that has the label: a node's labels
        # are mostly those of its type, zone and pool (made once, not once per node).
        self._label_requirement: dict[tuple[str, str], Requirement] = {}
        self.existing_view: object | None = None
        """The disruption pass's solver view of the nodes (``disruption.simulation``): the
        next pass's when none of them changed, what the next one is made from otherwise."""
        self.facts: object | None = None
        """What disruption read of each pod, Node and NodeClaim version
        (``disruption.passfacts.PassFacts``), kept across passes as the parsed pods are."""

    def label_requirements(
        self, node: Mapping[str, Any], labels: Mapping[str, str], lent: object = None
    ) -> Requirements:
        """``labels`` (the node's, with its hostname) as requirements, once per node version
        (and per version of the NodeClaim that ``lent`` labels to a node not registered yet)."""
        meta = node.get("metadata") or {}
        name = str(meta.get("name"))
        version = (meta.get("uid"), meta.get("resourceVersion"), lent)
        found = self._labels.found(name, version)
        if found is not None and all(version[:2]):
            return found
        shared = self._label_requirement
        requirements = Requirements(
            shared.get((key, str(value)))
            or shared.setdefault((key, str(value)), _label_requirement(key, str(value)))
            for key, value in labels.items()
        )
        self._labels.put(name, version, requirements)
        return requirements

    def allocatable(self, node: Mapping[str, Any]) -> ResourceList:
        """The node's ``status.allocatable``, parsed once per node version."""
        meta = node.get("metadata") or {}
        name, version = str(meta.get("name")), (meta.get("uid"), meta.get("resourceVersion"))
        found = self._allocatable.found(name, version)
        if found is not None and all(version):
            return found
        parsed = ResourceList.parse((node.get("status") or {}).get("allocatable"))
        self._allocatable.put(name, version, parsed)
        return parsed

    def of(
        self, node: str, pods: Sequence[PodObject], parses: Parses | None = None
    ) -> ResourceList:
        """The total requests of ``pods`` (``pods: 1`` each), the pods now bound to ``node``;
        ``parses``: their versions and parses, one for one, when the caller has them."""
        if parses is not None:
            keys, given = list(parses[0]), parses[1]
        else:
            keys, given = [], None
            for pod in pods:
                meta = pod.get("metadata") or {}
                uid, version = meta.get("uid"), meta.get("resourceVersion")
                if not uid or not version:
                    self._nodes.pop(node, None)
                    return ResourceList.sum(self.specs.get(p).requests for p in pods)
                keys.append((str(uid), str(version)))
        versions = dict(keys)
        state = self._nodes.get(node)
        if state is None:
            state = self._nodes[node] = NodeSum()
        elif state.versions == versions:
            return state.total
        specs = self.specs
        if not state.requests and len(versions) == len(keys):
            # A node read for the first time (each pod once): summed by equal requests.
            state.fill(
                [key[0] for key in keys],
                [spec.requests for spec in given]
                if given is not None
                else [
                    specs.of_version(pod, key).requests for pod, key in zip(pods, keys, strict=True)
                ],
            )
        else:
            for uid, version in state.versions.items():
                if versions.get(uid) != version:
                    state.change(uid, state.requests[uid], -1)
            for pod, key in zip(pods, keys, strict=True):
                if key[0] not in state.requests:
                    state.change(key[0], specs.of_version(pod, key).requests, +1)
        state.versions = versions
        state.total = ResourceList.from_milli(state.milli)
        return state.total

    def forget_others(self, nodes: Iterable[str]) -> None:
        """Drop the sums of nodes not in ``nodes`` (gone from the cluster)."""
        keep = set(nodes)
        for name in [n for n in self._nodes if n not in keep]:
            del self._nodes[name]
        self._labels.keep_only(keep)
        self._allocatable.keep_only(keep)
        self._existing.keep_only(keep)
        # What nodes gone named (their hostnames) goes once it outnumbers what they name.
        if len(self._label_requirement) > 16 * len(keep) + 1024:
            self._label_requirement.clear()

    def kept_existing(
        self, name: str, key: object | None, pods: Sequence[PodObject]
    ) -> ExistingNode | None:
        """The node's ``ExistingNode`` of the last round when ``key`` (its version, its
        NodeClaim's startup taints, its nominations) is the same and so are its bound pods
        (the very objects, or equal ones): what is derived from it (``ExistingView``) then
        tells an unchanged node by identity."""
        found = None if key is None else self._existing.found(name, key)
        if found is None or found.pods != pods:
            return None
        return found

    def keep_existing(self, name: str, key: object | None, node: ExistingNode) -> None:
        if key is None:
            self._existing.forget(name)
        else:
            self._existing.put(name, key, node)


def _label_requirement(key: str, value: str) -> Requirement:
    """``key In [value]``, as ``Requirements.from_labels`` makes it."""
    return Requirement.new(key, "In", (value,))


def _existing_node(
    node: Mapping[str, Any],
    name: str,
    pods: Sequence[PodObject],
    *,
    startup: tuple[Taint, ...],
    nominated: frozenset[str],
    lender: Mapping[str, Any] | None,
    lent: object,
    sums: ParsedCluster,
    parses: Parses | None,
) -> ExistingNode:
    """A registered node as the solver takes it (see ``existing_nodes``); ``lender``: its
    NodeClaim when the node is not registered yet, ``lent`` that NodeClaim's version."""
    meta, spec = node["metadata"], node.get("spec") or {}
    labels = dict(meta.get("labels") or {})
    taints = taints_of(spec.get("taints"))
    if lender is not None:
        # Its NodeClaim names it but registration has not synced it yet (or the Node's
        # cache has not caught up with the NodeClaim's): as upstream's cluster state, its
        # labels are its NodeClaim's, so it is ours and starting (below) and keeps the
        # room its pods were launched for. Judged by the kubelet's Node alone (tainted
        # unregistered, no NodePool label), that room was gone and a round launched again.
        own = _claim_labels(lender)
        own.pop(wellknown.LABEL_HOSTNAME, None)
        labels = {**labels, **own}
    if wellknown.LABEL_NODEPOOL in labels and labels.get(wellknown.LABEL_INITIALIZED) != "true":
        # Ours and still starting: its ephemeral and startup taints are about to go, so
        # pods are judged by the taints it will keep (upstream's initializing nodes).
        taints = tuple(t for t in taints if t.key not in EPHEMERAL_TAINT_KEYS and t not in startup)
    if spec.get("unschedulable"):
        taints = (*taints, UNSCHEDULABLE_TAINT)
    labels.setdefault(wellknown.LABEL_HOSTNAME, name)
    return ExistingNode(
        name=name,
        labels=labels,
        allocatable=sums.allocatable(node),
        requested=sums.of(name, pods, parses),
        label_requirements=sums.label_requirements(node, labels, lent),
        taints=taints,
        pods=pods,
        nodepool=labels.get(wellknown.LABEL_NODEPOOL),
        nominated=nominated,
    )


def bound_by_node(pods: Iterable[PodObject]) -> dict[str, list[PodObject]]:
    """The unfinished pods bound to each node, by its name, in ``pods``' order."""
    bound: dict[str, list[PodObject]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name and _is_active(pod):
            bound.setdefault(str(node_name), []).append(pod)
    return bound


def existing_nodes(
    snapshot: ClusterSnapshot,
    inventories: Sequence[NodePoolInventory],
    nominations: Mapping[str, frozenset[str]],
    parsed: ParsedCluster | None = None,
    bound: Mapping[str, Sequence[PodObject]] | None = None,
    *,
    some: bool = False,
    parses: Callable[[str, Sequence[PodObject]], Parses | None] | None = None,
) -> list[ExistingNode]:
    """Registered nodes and in-flight NodeClaims, in name order (deterministic passes).
    ``some``: ``snapshot`` holds some of the nodes only (what is kept of the others stays).

    ``parsed``: the bound pods' sums kept from earlier rounds (fresh when not given).
    ``bound``: the unfinished pods bound to each node, in the snapshot's order, when the
    caller has them already (``bound_by_node``); read from the snapshot otherwise.
    ``parses(name, pods)``: a node's pods' versions and parses when the caller read them
    (``None``: each one is looked up).
    """
    sums = parsed if parsed is not None else ParsedCluster()
    if bound is None:
        bound = bound_by_node(snapshot.pods)
    result = []
    registered = set()
    # A pod nominated to a NodeClaim stays nominated to its Node once it registers.
    claim_by_node: dict[str, Mapping[str, Any]] = {}
    for c in snapshot.nodeclaims:
        claim_node = (c.get("status") or {}).get("nodeName")
        if claim_node:
            claim_by_node[str(claim_node)] = c
    for node in sorted(snapshot.nodes, key=lambda n: str(n["metadata"]["name"])):
        meta = node["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        name = str(meta["name"])
        registered.add(name)
        pods = bound.get(name, [])
        claim = claim_by_node.get(name)
        claim_name = str(claim["metadata"]["name"]) if claim is not None else ""
        nominated = nominations.get(claim_name, _NONE)
        startup: tuple[Taint, ...] = ()
        if claim is not None:
            startup = taints_of((claim.get("spec") or {}).get("startupTaints"))
        lent = None
        if claim is not None and wellknown.LABEL_REGISTERED not in (meta.get("labels") or {}):
            claim_meta = claim.get("metadata") or {}
            lent = (claim_meta.get("uid"), claim_meta.get("resourceVersion"))
        # What the node's ExistingNode is made of: this version of it, its NodeClaim's
        # startup taints (and labels, lent to it until it registers), its nominations and its
        # pods (compared in ``kept_existing``).
        version = (meta.get("uid"), meta.get("resourceVersion"))
        known = all(version) and (lent is None or all(lent))
        # No nomination: ``None``, not the empty set, so that the key holds strings alone and
        # the collector stops tracking it.
        key = (version, startup, nominated or None, lent) if known else None
        existing = sums.kept_existing(name, key, pods)
        if existing is None:
            existing = _existing_node(
                node,
                name,
                pods,
                startup=startup,
                nominated=nominated,
                lender=claim if lent is not None else None,
                lent=lent,
                sums=sums,
                parses=None if parses is None else parses(name, pods),
            )
            sums.keep_existing(name, key, existing)
        result.append(existing)
    types_by_pool = {
        inv.nodepool: {it.name: it for it in inv.instance_types} for inv in inventories
    }
    for claim in sorted(snapshot.nodeclaims, key=lambda c: str(c["metadata"]["name"])):
        meta, status = claim["metadata"], claim.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("nodeName") in registered:
            continue
        labels = _claim_labels(claim)
        pool = labels.get(wellknown.LABEL_NODEPOOL, "")
        allocatable = _in_flight_allocatable(claim, types_by_pool.get(pool, {}))
        if allocatable is None:
            continue  # nothing known about what it will be; it cannot be counted on
        name = str(meta["name"])
        result.append(
            ExistingNode(
                name=name,
                labels=labels,
                allocatable=allocatable,
                taints=_in_flight_taints(claim, types_by_pool.get(pool, {})),
                nodepool=pool or None,
                in_flight=True,
                nominated=nominations.get(name, frozenset()),
                requirements=Requirements.from_dicts(
                    (claim.get("spec") or {}).get("requirements") or []
                ),
            )
        )
    if not some:
        sums.forget_others(registered)
    return result


def _in_flight_taints(
    claim: Mapping[str, Any], types: Mapping[str, InstanceType]
) -> tuple[Taint, ...]:
    """The NodePool's taints on a launching claim, and those of any type it may become.

    A type's own taints (a GPU MachineDeployment's, say) come with the node; until the claim
    knows its type, a pod must tolerate all of them to count on it.
    """
    taints = list(taints_of((claim.get("spec") or {}).get("taints")))
    for name in claim_instance_types(claim):
        instance_type = types.get(name)
        if instance_type is not None:
            taints.extend(t for t in instance_type.taints if t not in taints)
    return tuple(taints)


def _in_flight_allocatable(
    claim: Mapping[str, Any], types: Mapping[str, InstanceType]
) -> ResourceList | None:
    """What a launching claim will offer: its reported allocatable, else its smallest type's."""
    reported = (claim.get("status") or {}).get("allocatable")
    if reported:
        return ResourceList.parse(reported)
    candidates = [types[n] for n in claim_instance_types(claim) if n in types]
    if not candidates:
        return None
    smallest = min(
        candidates,
        key=lambda it: (it.allocatable.milli("cpu"), it.allocatable.milli("memory"), it.name),
    )
    return smallest.allocatable
