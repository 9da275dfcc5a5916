"""A pod as the solver reads it, parsed once: :class:`PodSpec`, and the cache that keeps it.

Why a module of its own: a pending pod is read by every provisioning round and every
consolidation simulation until it lands, and a bound pod by every round while it runs. Reading
its JSON each time (the requests summed over containers, the node affinity turned into
requirements, the class signature serialized) was most of a round's work before any placing
began. Here the JSON is read once per ``(uid, resourceVersion)``, the only key that says the
object did not change, into a frozen value of typed parts (requirements, tolerations, host
ports, ``pod_terms``) that the solver, the topology, relaxation and the node views share. This
is the one module of ``core.scheduling`` that reads a pod's JSON (``daemons`` reads the
DaemonSets'); ``tests/core/scheduling/test_parse_once.py`` keeps it so.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final

from karpenter_capi.core.scheduling.assembly import open_twin
from karpenter_capi.core.scheduling.hostports import HostPort
from karpenter_capi.core.scheduling.kept import Kept
from karpenter_capi.core.scheduling.pod_terms import NodeTerm, PodAffinityTerm, Spread
from karpenter_capi.core.scheduling.podspec_class import ClassMemo, class_parts
from karpenter_capi.core.scheduling.podspec_terms import (
    REQUIRED,
    WeightedTerm,
    list_problem,
    preferred_terms,
    required_terms,
    spread,
)
from karpenter_capi.core.values.requirements import Requirements, preferred_node_terms
from karpenter_capi.core.values.resources import ResourceList, empty, pod_requests
from karpenter_capi.core.values.taints import Toleration, parse_tolerations

PodObject = Mapping[str, Any]
"""A Pod as the API server returns it (JSON): what the solver is given and hands back for
binding and Events. Only this module reads its fields."""

SPEC_ERRORS: Final = (ValueError, TypeError, AttributeError, KeyError)
"""What reading a pod spec the API server would have refused raises (a string where a list is,
an unknown operator, a malformed quantity): one such pod must not stop the round."""


def pod_key(pod: PodObject) -> str:
    """``namespace/name``, the key pods are reported and nominated by."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def key_of(pod: PodObject, spec: PodSpec | None) -> str:
    """``pod_key(pod)``, read from ``spec`` when it is this very pod's (no dict lookups)."""
    return spec.key if spec is not None and spec.raw is pod else pod_key(pod)


def version_of(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(uid, resourceVersion)`` of an API object, ``None`` when it lacks either (a test's or a
    benchmark's hand-made object, which must then be read afresh every time)."""
    meta = obj.get("metadata") or {}
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    if not uid or not version:
        return None
    return (str(uid), str(version))


@dataclass(frozen=True, slots=True)
class Owner:
    """One ``ownerReferences`` entry: who recreates the pod if it goes."""

    kind: str
    name: str
    controller: bool


@dataclass(frozen=True, slots=True)
class PodSpec:
    """What scheduling reads of one pod, parsed once (see :func:`parse_pod`).

    ``requests`` include ``pods: 1`` (the pod slot). The constraints relaxation gives up one
    at a time (``preferences.relax``) are kept as written: ``node_terms`` (the required node
    affinity's ORed terms), ``preferred_node_terms`` (heaviest first), the required pod
    (anti-)affinity terms and the preferred ones with their weights, ``spreads`` and
    ``tolerations``. Derived from them (:func:`rederived`): ``requirements``, what the pod asks
    of a node's labels with its heaviest preferred node term as a requirement, ``None`` when
    its first required term can never match a new node; ``required``, the same without the
    preference; ``topology_signature``, equal for pods the topology may count alike.
    ``class_key`` is equal for pods the solver may treat alike (one Deployment's replicas).
    ``problem`` says why the spec cannot be read (the pod is then reported, never placed) and
    leaves the other parsed fields empty. ``raw`` is the object parsed, kept for Events and
    for binding.
    """

    key: str
    uid: str
    name: str
    namespace: str
    labels: Mapping[str, str]
    node_name: str
    phase: str
    deleting: bool
    owners: tuple[Owner, ...]
    requests: ResourceList
    host_ports: tuple[HostPort, ...]
    tolerations: tuple[Toleration, ...]
    node_selector: Requirements
    node_terms: tuple[NodeTerm, ...]
    preferred_node_terms: tuple[tuple[int, Requirements], ...]
    affinity: tuple[PodAffinityTerm, ...]
    preferred_affinity: tuple[WeightedTerm, ...]
    anti_affinity: tuple[PodAffinityTerm, ...]
    preferred_anti_affinity: tuple[WeightedTerm, ...]
    spreads: tuple[Spread, ...]
    requirements: Requirements | None
    required: Requirements
    class_key: str
    topology_signature: str
    problem: str | None
    raw: PodObject

    @property
    def active(self) -> bool:
        """Still running or about to: not ``Succeeded`` or ``Failed``."""
        return self.phase not in ("Succeeded", "Failed")

    @property
    def strict_affinity(self) -> tuple[PodAffinityTerm, ...]:
        """The pod affinity terms the topology enforces: the preferred ones count as required
        until relaxation drops them, as Karpenter's topology counts them."""
        return _strict(self.affinity, self.preferred_affinity)

    @property
    def strict_anti_affinity(self) -> tuple[PodAffinityTerm, ...]:
        """The pod anti-affinity terms the topology enforces (see :attr:`strict_affinity`)."""
        return _strict(self.anti_affinity, self.preferred_anti_affinity)


def _strict(
    required: tuple[PodAffinityTerm, ...], preferred: tuple[WeightedTerm, ...]
) -> tuple[PodAffinityTerm, ...]:
    if not preferred:
        return required
    return required + tuple(term for _, term in preferred if term is not None)


def node_requirements(pod: PodSpec, *, preferred: bool = True) -> Requirements | None:
    """What ``pod`` asks of a node's labels, with preferences treated as requirements.

    As Karpenter: ``nodeSelector``, the first required node-affinity term, and (unless
    ``preferred`` is false) the heaviest preferred node-affinity term; relaxation removes the
    terms one at a time when the pod does not fit. ``None`` when the first required term can
    never match a new node (``NodeTerm.pins_node``).
    """
    return _node_requirements(
        pod.node_selector, pod.node_terms, pod.preferred_node_terms if preferred else ()
    )


def _node_requirements(
    selector: Requirements,
    terms: tuple[NodeTerm, ...],
    preferred: tuple[tuple[int, Requirements], ...],
) -> Requirements | None:
    requirements = selector
    if preferred:
        requirements = requirements.merged(preferred[0][1])
    if terms:
        first = terms[0]
        if first.pins_node:
            return None
        requirements = requirements.merged(first.requirements)
    return requirements


def node_alternatives(pod: PodSpec) -> tuple[Requirements, ...]:
    """``nodeSelector`` AND each required node term a new node can match, as alternatives (one
    with no requirement when there are no terms; none when no term can match a new node)."""
    if not pod.node_terms:
        return (pod.node_selector,)
    return tuple(
        pod.node_selector.merged(term.requirements) for term in pod.node_terms if not term.pins_node
    )


def spread_node_terms(pod: PodSpec) -> tuple[Requirements, ...]:
    """The node terms a spread with ``nodeAffinityPolicy: Honor`` counts nodes by.

    ``matchFields`` pins node names, which only existing nodes have; dropping it counts a little
    more than kube-scheduler would, never less.
    """
    selector = pod.node_selector
    return tuple(selector.merged(term.requirements) for term in pod.node_terms) or (selector,)


def rederived(pod: PodSpec, *, relaxed: bool = False) -> PodSpec:
    """``pod`` with the fields derived from its constraints made again (after relaxation
    changed them: ``relaxed`` then also gives it a class of its own)."""
    return replace(
        pod,
        requirements=node_requirements(pod),
        required=node_requirements(pod, preferred=False) or Requirements(),
        topology_signature=_signature(
            pod.namespace,
            pod.labels,
            affinity=pod.strict_affinity,
            anti_affinity=pod.strict_anti_affinity,
            spreads=pod.spreads,
            node_filter=(pod.node_selector, pod.node_terms, pod.tolerations),
        ),
        # One more relaxation step: pods of one class relaxed alike stay one class.
        class_key=f"{pod.class_key}~" if relaxed else pod.class_key,
    )


def _signature(
    namespace: str,
    labels: Mapping[str, str],
    *,
    affinity: tuple[PodAffinityTerm, ...],
    anti_affinity: tuple[PodAffinityTerm, ...],
    spreads: tuple[Spread, ...],
    node_filter: tuple[Requirements, tuple[NodeTerm, ...], tuple[Toleration, ...]],
) -> str:
    """What the topology tells pods apart by, as text: a string hashes once and compares in C,
    and the topology looks a pod's profile up for every candidate node and claim. The values'
    reprs are exact (requirements print their sorted values); equal constraints whose sets
    print in another order only get a second profile sharing the same groups."""
    parts: tuple[object, ...] = (
        namespace or "default",
        sorted(labels.items()),
        affinity,
        anti_affinity,
    )
    if spreads:
        # A spread may count only the nodes the pod's node affinity and tolerations allow.
        parts += (spreads, node_filter)
    return repr(parts)


def scheduling_spec(pod: PodObject) -> Mapping[str, Any]:
    """The parts of a pod the solver reads: pods equal here form one class."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    return {
        "namespace": meta.get("namespace"),
        "labels": meta.get("labels"),
        "nodeSelector": spec.get("nodeSelector"),
        "affinity": spec.get("affinity"),
        "tolerations": spec.get("tolerations"),
        "topologySpreadConstraints": spec.get("topologySpreadConstraints"),
        "containers": [(c.get("resources"), c.get("ports")) for c in spec.get("containers") or ()],
        "initContainers": [
            (c.get("resources"), c.get("ports"), c.get("restartPolicy"))
            for c in spec.get("initContainers") or ()
        ],
        "overhead": spec.get("overhead"),
        "resources": spec.get("resources"),
    }


def _container_host_ports(container: Mapping[str, Any]) -> Iterator[HostPort]:
    for port in container.get("ports") or ():
        host_port = int(port.get("hostPort") or 0)
        if host_port <= 0:
            continue
        yield HostPort(str(port.get("hostIP") or ""), str(port.get("protocol") or ""), host_port)


def pod_host_ports(pod: PodObject) -> tuple[HostPort, ...]:
    """The host ports ``pod`` binds: its sidecars', then its app containers' ports."""
    spec = pod.get("spec") or {}
    ports: list[HostPort] = []
    for init_container in spec.get("initContainers") or ():
        # A classic init container has exited before the pod runs; only sidecars keep a port.
        if init_container.get("restartPolicy") == "Always":
            ports.extend(_container_host_ports(init_container))
    for container in spec.get("containers") or ():
        ports.extend(_container_host_ports(container))
    return tuple(ports)


def _unreadable(pod: PodObject, meta: Mapping[str, Any], problem: str) -> PodSpec:
    # Its labels still count where it is bound (another pod's spread or affinity selects it).
    labels = meta.get("labels")
    return PodSpec(
        key=pod_key(pod),
        uid=str(meta.get("uid") or ""),
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        labels=labels if isinstance(labels, Mapping) else {},
        node_name="",
        phase="",
        deleting=bool(meta.get("deletionTimestamp")),
        owners=(),
        requests=empty(),
        host_ports=(),
        tolerations=(),
        node_selector=Requirements(),
        node_terms=(),
        preferred_node_terms=(),
        affinity=(),
        preferred_affinity=(),
        anti_affinity=(),
        preferred_anti_affinity=(),
        spreads=(),
        requirements=None,
        required=Requirements(),
        class_key="",
        topology_signature="",
        problem=problem,
        raw=pod,
    )


def _class_of(pod: PodObject) -> Hashable | None:
    """``pod``'s class (``podspec_class``), or ``None`` when its spec cannot be read that far
    (the full parse then says why, in its own words)."""
    try:
        # scheduling_spec's values in its order, as a list: the same text for the same parts,
        # without writing its ten keys for every pod of a batch.
        spec = pod.get("spec") or {}
        meta = pod.get("metadata") or {}
        return class_parts(
            (
                meta.get("namespace"),
                meta.get("labels"),
                spec.get("nodeSelector"),
                spec.get("affinity"),
                spec.get("tolerations"),
                spec.get("topologySpreadConstraints"),
                [(c.get("resources"), c.get("ports")) for c in spec.get("containers") or ()],
                [
                    (c.get("resources"), c.get("ports"), c.get("restartPolicy"))
                    for c in spec.get("initContainers") or ()
                ],
                spec.get("overhead"),
                spec.get("resources"),
            )
        )
    except SPEC_ERRORS:
        return None


# The fields of a PodSpec that pods of one class share, from ``requests`` to ``problem`` (the
# namespace is shared too, but sits among the fields that say who the pod is).
_CLASS_FIELDS: Final = tuple(
    f.name for f in fields(PodSpec)[[f.name for f in fields(PodSpec)].index("requests") : -1]
)
_class_part: Final = operator.attrgetter(*_CLASS_FIELDS)
_OpenPodSpec: Final = open_twin(PodSpec)


def _like(template: PodSpec, pod: PodObject, meta: Mapping[str, Any]) -> PodSpec:
    """``pod`` read as ``template``, a pod of its class: only who it is is read again. Written
    field by field into ``PodSpec``'s open twin (``assembly``): its ``__init__`` was a third of
    reading a pod of a known class. Every field is set, in order."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    new: Any = object.__new__(_OpenPodSpec)
    new.key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"  # pod_key, meta read already
    new.uid = str(meta.get("uid") or "")
    new.name = str(meta.get("name") or "")
    new.namespace = template.namespace
    new.labels = template.labels  # the pod's own, equal (the class's key holds them): one a class
    new.node_name = str(spec.get("nodeName") or "")
    new.phase = str(status.get("phase") or "")
    new.deleting = bool(meta.get("deletionTimestamp"))
    new.owners = _owners(meta)
    (
        new.requests,
        new.host_ports,
        new.tolerations,
        new.node_selector,
        new.node_terms,
        new.preferred_node_terms,
        new.affinity,
        new.preferred_affinity,
        new.anti_affinity,
        new.preferred_anti_affinity,
        new.spreads,
        new.requirements,
        new.required,
        new.class_key,
        new.topology_signature,
        new.problem,
    ) = _class_part(template)
    new.raw = pod
    new.__class__ = PodSpec
    return new  # type: ignore[no-any-return]


def _owners(meta: Mapping[str, Any]) -> tuple[Owner, ...]:
    if not meta.get("ownerReferences"):
        return ()
    return tuple(
        Owner(str(o.get("kind") or ""), str(o.get("name") or ""), bool(o.get("controller")))
        for o in meta.get("ownerReferences") or ()
    )


def parse_pod(pod: PodObject, memo: ClassMemo[PodSpec] | None = None) -> PodSpec:
    """Read ``pod`` (JSON) into a :class:`PodSpec`; a spec the API server would have refused
    gives one whose ``problem`` says why, never an exception. ``memo``: pods already read, by
    class, to copy the class's part from."""
    meta = pod.get("metadata") or {}
    parts = _class_of(pod) if memo is not None else None
    if memo is not None and parts is not None:
        template = memo.get(parts)
        if template is not None:
            try:
                return _like(template, pod, meta)
            except SPEC_ERRORS:
                pass  # who it is cannot be read: the full parse says why
    parsed = _parse(pod, meta)
    if memo is not None and parts is not None and parsed.problem is None:
        memo.put(parts, parsed)
    return parsed


def _parse(pod: PodObject, meta: Mapping[str, Any]) -> PodSpec:
    try:
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        requests = pod_requests(pod, include_pod_count=True)
        negative = sorted(name for name in requests if requests.milli(name) < 0)
        if negative:
            return _unreadable(pod, meta, f"requests of {', '.join(negative)} must not be negative")
        host_ports = pod_host_ports(pod)
        problem = list_problem(spec)
        if problem is not None:
            return _unreadable(pod, meta, problem)
        labels = meta.get("labels") or {}
        namespace = str(meta.get("namespace") or "")
        affinity = spec.get("affinity") or {}
        node_affinity = affinity.get("nodeAffinity") or {}
        pod_affinity = affinity.get("podAffinity") or {}
        pod_anti_affinity = affinity.get("podAntiAffinity") or {}
        tolerations = parse_tolerations(spec.get("tolerations") or ())
        node_selector = Requirements.from_labels(spec.get("nodeSelector") or {})
        node_terms = tuple(
            NodeTerm(
                Requirements.from_dicts(term.get("matchExpressions") or ()),
                bool(term.get("matchFields") or not term.get("matchExpressions")),
            )
            for term in (node_affinity.get(REQUIRED) or {}).get("nodeSelectorTerms") or ()
        )
        preferred_nodes = tuple(preferred_node_terms(pod))
        required_affinity = required_terms(pod_affinity, labels)
        preferred_affinity = preferred_terms(pod_affinity, labels)
        required_anti = required_terms(pod_anti_affinity, labels)
        preferred_anti = preferred_terms(pod_anti_affinity, labels)
        spreads = tuple(
            spread(constraint, labels) for constraint in spec.get("topologySpreadConstraints") or ()
        )
        return PodSpec(
            key=pod_key(pod),
            uid=str(meta.get("uid") or ""),
            name=str(meta.get("name") or ""),
            namespace=namespace,
            labels=labels,
            node_name=str(spec.get("nodeName") or ""),
            phase=str(status.get("phase") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            owners=_owners(meta),
            requests=requests,
            host_ports=host_ports,
            tolerations=tolerations,
            node_selector=node_selector,
            node_terms=node_terms,
            preferred_node_terms=preferred_nodes,
            affinity=required_affinity,
            preferred_affinity=preferred_affinity,
            anti_affinity=required_anti,
            preferred_anti_affinity=preferred_anti,
            spreads=spreads,
            requirements=_node_requirements(node_selector, node_terms, preferred_nodes),
            required=_node_requirements(node_selector, node_terms, ()) or Requirements(),
            class_key=json.dumps(scheduling_spec(pod), sort_keys=True, default=str),
            topology_signature=_signature(
                namespace,
                labels,
                affinity=_strict(required_affinity, preferred_affinity),
                anti_affinity=_strict(required_anti, preferred_anti),
                spreads=spreads,
                node_filter=(node_selector, node_terms, tolerations),
            ),
            problem=None,
            raw=pod,
        )
    except SPEC_ERRORS as exc:
        return _unreadable(pod, meta, f"cannot read its spec: {exc}")


def unreadable_pod(pod: PodObject) -> str | None:
    """Why ``pod``'s scheduling constraints cannot be read, or ``None`` when they can.

    The API server refuses such specs, but a webhook-less test cluster, an aggregated API or a
    bug upstream may still hand one over; the pod is then reported unschedulable with this
    text instead of taking the whole provisioning round down with it.
    """
    return parse_pod(pod).problem


_MISSING_CLAIM: Final = re.compile(r'persistentvolumeclaim "([^"]+)" not found')


def missing_claim_reason(pod: PodObject) -> str | None:
    """The FailedScheduling text when kube-scheduler said the pod's claim does not exist (its
    ``PodScheduled`` message), naming the volume to fix; ``None`` otherwise."""
    conditions = (pod.get("status") or {}).get("conditions") or ()
    said = next(
        (str(c.get("message") or "") for c in conditions if c.get("type") == "PodScheduled"), ""
    )
    found = _MISSING_CLAIM.search(said)
    if found is None:
        return None
    claim = found.group(1)
    volumes = (pod.get("spec") or {}).get("volumes") or ()
    where = next(
        (
            f"spec.volumes[{index}].persistentVolumeClaim.claimName"
            for index, volume in enumerate(volumes)
            if ((volume or {}).get("persistentVolumeClaim") or {}).get("claimName") == claim
        ),
        "its volumes",
    )
    return (
        f'persistentvolumeclaim "{claim}" not found (kube-scheduler): no new node can help '
        f"until it exists; create the PersistentVolumeClaim or fix {where}"
    )


class PodSpecs:
    """Parsed pods by ``(uid, resourceVersion)``, kept across rounds.

    A pod without both (a test's, a benchmark's) is parsed on every call. An entry not asked
    for during a whole round (``new_round``) is dropped, so deleted pods do not accumulate.
    ``parses`` counts the parses, for tests and figures.
    """

    def __init__(self) -> None:
        self._kept: Kept[tuple[str, str], PodSpec] = Kept()
        self._memo: ClassMemo[PodSpec] = ClassMemo()
        self.parses = 0

    def __len__(self) -> int:
        return len(self._kept)

    def new_round(self) -> None:
        """Start a round: what the last round did not ask for goes at the end of this one."""
        self._kept.new_round()
        self._memo.new_round()

    def get(self, pod: Mapping[str, Any]) -> PodSpec:
        """``pod`` parsed, cached per version; a copy unbound (``state.unbound``: a pod that has
        to move) shares its version's parse, and the spec's ``raw`` is always ``pod``."""
        return self.of_version(pod, version_of(pod))

    def get_all(self, pods: Iterable[Mapping[str, Any]]) -> list[PodSpec]:
        """``get`` of each of ``pods``, in order (a node's: two calls fewer per pod)."""
        kept, result = self._kept.get, list[PodSpec]()
        for pod in pods:
            meta = pod.get("metadata") or {}
            uid, version = meta.get("uid"), meta.get("resourceVersion")
            found = kept((str(uid), str(version))) if uid and version else None
            result.append(found if found is not None and found.raw is pod else self.get(pod))
        return result

    def of_version(self, pod: Mapping[str, Any], key: tuple[str, str] | None) -> PodSpec:
        """``get(pod)`` when its ``version_of`` is known already (``key``)."""
        if key is None:
            self.parses += 1
            return parse_pod(pod, self._memo)
        found = self._kept.get(key)
        if found is None:
            self.parses += 1
            found = parse_pod(pod, self._memo)
            self._kept.put(key, found)
        if found.raw is pod:
            return found
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        return replace(found, raw=pod, node_name=node_name)
