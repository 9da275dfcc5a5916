"""A pod as the solver reads it, parsed once: :class:`PodSpec`, and the cache that keeps it.

Why a module of its own: a pending pod is read by every provisioning round and every
consolidation simulation until it lands, and a bound pod by every round while it runs. Reading
its JSON each time (the requests summed over containers, the node affinity turned into
requirements, the class signature serialized) was most of a round's work before any placing
began. Here the JSON is read once per ``(uid, resourceVersion)``, the only key that says the
object did not change, into a frozen value the solver, the topology and the node views share;
this is the one module of ``core.scheduling`` that reads a pod's raw fields for scheduling.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from karpenter_capi.core.scheduling.hostports import HostPort
from karpenter_capi.core.scheduling.preferences import relax, strict_topology
from karpenter_capi.core.values.requirements import (
    Requirements,
    node_selector_terms,
    preferred_node_terms,
)
from karpenter_capi.core.values.resources import ResourceList, empty, pod_requests
from karpenter_capi.core.values.taints import EFFECTS, Toleration, parse_tolerations

PodObject = Mapping[str, Any]
"""A Pod as the API server returns it (JSON): what the solver is given and hands back for
binding and Events. Only this module reads its fields."""

DaemonSetObject = Mapping[str, Any]
"""A DaemonSet as the API server returns it (JSON), read only by :func:`parse_daemon`."""


def pod_key(pod: PodObject) -> str:
    """``namespace/name``, the key pods are reported and nominated by."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


_TOLERATION_OPERATORS: Final = ("Exists", "Equal", "")
_UNSATISFIABLE: Final = ("DoNotSchedule", "ScheduleAnyway", "")
SPEC_ERRORS: Final = (ValueError, TypeError, AttributeError, KeyError)
"""What reading a pod spec the API server would have refused raises (a string where a list is,
an unknown operator, a malformed quantity): one such pod must not stop the round."""


@dataclass(frozen=True, slots=True)
class Owner:
    """One ``ownerReferences`` entry: who recreates the pod if it goes."""

    kind: str
    name: str
    controller: bool


@dataclass(frozen=True, slots=True)
class PodSpec:
    """What scheduling reads of one pod, parsed once (see :func:`parse_pod`).

    ``requests`` include ``pods: 1`` (the pod slot). ``requirements`` are what the pod asks of
    a node's labels with its heaviest preferred node term as a requirement, ``None`` when its
    first required term can never match a new node; ``required`` the same without the
    preference. ``strict`` is the pod with its topology preferences as requirements
    (``preferences.strict_topology``), what the topology counts it by. ``class_key`` is equal
    for pods the solver may treat alike (one Deployment's replicas). ``problem`` says why the
    spec cannot be read (the pod is then reported, never placed) and leaves the other parsed
    fields empty. ``raw`` is the object parsed, kept for Events and for callers that still
    take JSON.
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
    requirements: Requirements | None
    required: Requirements
    preferred_node_terms: tuple[tuple[int, Requirements], ...]
    pod_affinity: Mapping[str, Any]
    pod_anti_affinity: Mapping[str, Any]
    spreads: tuple[Mapping[str, Any], ...]
    class_key: str
    topology_key: tuple[Any, ...]
    problem: str | None
    strict: Mapping[str, Any]
    raw: Mapping[str, Any]

    @property
    def active(self) -> bool:
        """Still running or about to: not ``Succeeded`` or ``Failed``."""
        return self.phase not in ("Succeeded", "Failed")


def scheduling_spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
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


def pod_requirements(
    pod: Mapping[str, Any],
    *,
    preferred: bool = True,
    terms: list[tuple[int, Requirements]] | None = None,
) -> Requirements | None:
    """What a pod asks of a node's labels, with preferences treated as requirements.

    As Karpenter: ``nodeSelector``, the first required node-affinity term, and (unless
    ``preferred`` is false) the heaviest preferred node-affinity term; relaxation removes the
    terms one at a time when the pod does not fit. ``None`` when the first required term can
    never match a new node: it selects by ``matchFields`` (an existing node's name) or is empty
    (Kubernetes: selects no node). ``terms``: the pod's preferred node terms, if already read.
    """
    spec = pod.get("spec") or {}
    requirements = Requirements.from_labels(spec.get("nodeSelector") or {})
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    if preferred:
        heaviest = (preferred_node_terms(pod) if terms is None else terms)[:1]
        for _, preference in heaviest:
            requirements = requirements.merged(preference)
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    selector_terms = required.get("nodeSelectorTerms") or []
    if selector_terms:
        first = selector_terms[0]
        if first.get("matchFields") or not first.get("matchExpressions"):
            return None
        requirements = requirements.merged(
            Requirements.from_dicts(first.get("matchExpressions") or [])
        )
    return requirements


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


def _list_problem(spec: Mapping[str, Any]) -> str | None:
    """What the API server would refuse in the tolerations or spreads, or ``None``."""
    for field in ("tolerations", "topologySpreadConstraints"):
        items = spec.get(field) or []
        if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
            return f"{field} is not a list of objects"
    for index, toleration in enumerate(spec.get("tolerations") or ()):
        operator = toleration.get("operator") or ""
        effect = toleration.get("effect") or ""
        if operator not in _TOLERATION_OPERATORS:
            return f"tolerations[{index}]: operator {operator!r} is not Exists or Equal"
        if effect and effect not in EFFECTS:
            return f"tolerations[{index}]: effect {effect!r} is not one of {', '.join(EFFECTS)}"
    for index, constraint in enumerate(spec.get("topologySpreadConstraints") or ()):
        where = f"topologySpreadConstraints[{index}]"
        if int(constraint.get("maxSkew", 1)) < 1:
            return f"{where}: maxSkew must be at least 1"
        if (constraint.get("whenUnsatisfiable") or "") not in _UNSATISFIABLE:
            return f"{where}: whenUnsatisfiable {constraint['whenUnsatisfiable']!r} is unknown"
        if not constraint.get("topologyKey"):
            return f"{where}: topologyKey is required"
    return None


def _unreadable(pod: Mapping[str, Any], meta: Mapping[str, Any], problem: str) -> PodSpec:
    return PodSpec(
        key=pod_key(pod),
        uid=str(meta.get("uid") or ""),
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        labels={},
        node_name="",
        phase="",
        deleting=False,
        owners=(),
        requests=empty(),
        host_ports=(),
        tolerations=(),
        requirements=None,
        required=Requirements(),
        preferred_node_terms=(),
        pod_affinity={},
        pod_anti_affinity={},
        spreads=(),
        class_key="",
        topology_key=(),
        problem=problem,
        strict=pod,
        raw=pod,
    )


def parse_pod(pod: Mapping[str, Any]) -> PodSpec:
    """Read ``pod`` (JSON) into a :class:`PodSpec`; a spec the API server would have refused
    gives one whose ``problem`` says why, never an exception."""
    meta = pod.get("metadata") or {}
    try:
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        requests = pod_requests(pod, include_pod_count=True)
        negative = sorted(name for name in requests if requests.milli(name) < 0)
        if negative:
            return _unreadable(pod, meta, f"requests of {', '.join(negative)} must not be negative")
        host_ports = pod_host_ports(pod)
        problem = _list_problem(spec)
        if problem is not None:
            return _unreadable(pod, meta, problem)
        return PodSpec(
            key=pod_key(pod),
            uid=str(meta.get("uid") or ""),
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            labels=meta.get("labels") or {},
            node_name=str(spec.get("nodeName") or ""),
            phase=str(status.get("phase") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            owners=tuple(
                Owner(str(o.get("kind") or ""), str(o.get("name") or ""), bool(o.get("controller")))
                for o in meta.get("ownerReferences") or ()
            ),
            requests=requests,
            host_ports=host_ports,
            problem=None,
            raw=pod,
            **_constraints(pod),
        )
    except SPEC_ERRORS as exc:
        return _unreadable(pod, meta, f"cannot read its spec: {exc}")


def _constraints(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a :class:`PodSpec` that relaxation can change, read from ``pod``."""
    terms = preferred_node_terms(pod)
    strict = strict_topology(pod)
    strict_spec = strict.get("spec") or {}
    affinity = strict_spec.get("affinity") or {}
    return {
        "tolerations": parse_tolerations((pod.get("spec") or {}).get("tolerations") or ()),
        "requirements": pod_requirements(pod, terms=terms),
        "required": pod_requirements(pod, preferred=False) or Requirements(),
        "preferred_node_terms": tuple(terms),
        "pod_affinity": affinity.get("podAffinity") or {},
        "pod_anti_affinity": affinity.get("podAntiAffinity") or {},
        "spreads": tuple(strict_spec.get("topologySpreadConstraints") or ()),
        "class_key": json.dumps(scheduling_spec(pod), sort_keys=True, default=str),
        "topology_key": topology_signature(strict),
        "strict": strict,
    }


def _required_terms(affinity: Mapping[str, Any], kind: str) -> Any:
    return (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or ()


def topology_signature(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the topology tells pods apart by: namespace, labels and the constraints it enforces
    (``pod`` as the topology reads it: ``strict_topology``'s view)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    spreads = spec.get("topologySpreadConstraints")
    affinity = spec.get("affinity") or {}
    # repr is exact for JSON data and far cheaper than canonicalising; two equal pods whose
    # dicts differ only in key order just get two profiles sharing the same groups.
    signature: tuple[Any, ...] = (
        meta.get("namespace") or "default",
        repr(meta.get("labels") or {}),
        repr(_required_terms(affinity, "podAffinity")),
        repr(_required_terms(affinity, "podAntiAffinity")),
    )
    if spreads:
        signature += (
            repr(spreads),
            repr(spec.get("nodeSelector")),
            repr(affinity.get("nodeAffinity")),
            repr(spec.get("tolerations")),
        )
    return signature


def relax_spec(pod: PodSpec, *, tolerate_prefer_no_schedule: bool = True) -> PodSpec | None:
    """``pod`` with one more preference given up (``preferences.relax``), or ``None`` if none
    is left: a new spec sharing everything relaxation leaves alone (requests, ports, owners)."""
    relaxed = relax(pod.raw, tolerate_prefer_no_schedule=tolerate_prefer_no_schedule)
    if relaxed is None:
        return None
    try:
        return replace(pod, raw=relaxed, **_constraints(relaxed))
    except SPEC_ERRORS:
        return parse_pod(relaxed)  # says what it cannot read


def unreadable_pod(pod: Mapping[str, Any]) -> str | None:
    """Why ``pod``'s scheduling constraints cannot be read, or ``None`` when they can.

    The API server refuses such specs, but a webhook-less test cluster, an aggregated API or a
    bug upstream may still hand one over; the pod is then reported unschedulable with this
    text instead of taking the whole provisioning round down with it.
    """
    return parse_pod(pod).problem


class PodSpecs:
    """Parsed pods by ``(uid, resourceVersion)``, kept across rounds.

    A pod without both (a test's, a benchmark's) is parsed on every call. An entry not asked
    for during a whole round (``new_round``) is dropped, so deleted pods do not accumulate.
    ``parses`` counts the parses, for tests and figures.
    """

    def __init__(self) -> None:
        self._current: dict[tuple[str, str], PodSpec] = {}
        self._previous: dict[tuple[str, str], PodSpec] = {}
        self.parses = 0

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)

    def new_round(self) -> None:
        """Start a round: what the last round did not ask for goes at the end of this one."""
        self._previous, self._current = self._current, {}

    def get(self, pod: Mapping[str, Any]) -> PodSpec:
        """``pod`` parsed, from the cache when this version of it was parsed before.

        A copy of the same version that differs only by being unbound (``state.unbound``: a
        pod that has to move) shares the parse; the returned spec's ``raw`` is always ``pod``.
        """
        meta = pod.get("metadata") or {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not uid or not version:
            self.parses += 1
            return parse_pod(pod)
        key = (str(uid), str(version))
        found = self._current.get(key)
        if found is None:
            found = self._previous.pop(key, None)
            if found is None:
                self.parses += 1
                found = parse_pod(pod)
            self._current[key] = found
        if found.raw is pod:
            return found
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        strict = pod if found.strict is found.raw else strict_topology(pod)
        return replace(found, raw=pod, strict=strict, node_name=node_name)


_NO_EXECUTE: Final = "NoExecute"
_NO_SCHEDULE: Final = "NoSchedule"

DAEMON_TOLERATIONS: Final[tuple[tuple[str, str], ...]] = (
    ("node.kubernetes.io/not-ready", _NO_EXECUTE),
    ("node.kubernetes.io/unreachable", _NO_EXECUTE),
    ("node.kubernetes.io/disk-pressure", _NO_SCHEDULE),
    ("node.kubernetes.io/memory-pressure", _NO_SCHEDULE),
    ("node.kubernetes.io/pid-pressure", _NO_SCHEDULE),
    ("node.kubernetes.io/unschedulable", _NO_SCHEDULE),
)
"""``(key, effect)`` of the tolerations the DaemonSet controller gives every daemon pod."""

HOST_NETWORK_DAEMON_TOLERATION: Final = ("node.kubernetes.io/network-unavailable", _NO_SCHEDULE)
"""The extra toleration a daemon pod on the host network gets (it needs no pod network)."""


def daemon_pod(daemonset: DaemonSetObject) -> dict[str, Any]:
    """The pod the DaemonSet controller would create from ``daemonset`` (no node name yet).

    A deep copy of ``spec.template`` in the DaemonSet's namespace, with the controller's
    default tolerations added (an existing identical toleration is not duplicated; one that
    differs only in ``tolerationSeconds`` is replaced, as ``AddOrUpdateTolerationInPodSpec``
    does).
    """
    meta = daemonset.get("metadata") or {}
    template = (daemonset.get("spec") or {}).get("template") or {}
    pod_meta = copy.deepcopy(dict(template.get("metadata") or {}))
    pod_meta.setdefault("namespace", meta.get("namespace") or "default")
    if "name" not in pod_meta and meta.get("name"):
        pod_meta["generateName"] = f"{meta['name']}-"
    spec = copy.deepcopy(dict(template.get("spec") or {}))

    defaults = list(DAEMON_TOLERATIONS)
    if spec.get("hostNetwork"):
        defaults.append(HOST_NETWORK_DAEMON_TOLERATION)
    tolerations: list[dict[str, Any]] = list(spec.get("tolerations") or [])
    for key, effect in defaults:
        wanted = Toleration(key, "Exists", "", effect)
        # v1.Toleration.MatchToleration: key, operator, value and effect all equal.
        tolerations = [t for t in tolerations if Toleration.from_dict(t) != wanted]
        tolerations.append(wanted.to_dict())
    spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


@dataclass(frozen=True, slots=True)
class DaemonSpec:
    """A DaemonSet's pod, parsed, with the node terms it accepts (``alternatives``: its
    ``nodeSelector`` AND each required node-affinity term, as ``node_selector_terms``)."""

    name: str
    pod: PodSpec
    alternatives: tuple[Requirements, ...]


def parse_daemons(daemonsets: Iterable[DaemonSetObject]) -> tuple[DaemonSpec, ...]:
    """The daemon pods of ``daemonsets``; a DaemonSet whose pod cannot be read raises a
    ``ValueError`` naming it."""
    daemons = []
    for daemonset in daemonsets:
        pod = daemon_pod(daemonset)
        spec = parse_pod(pod)
        meta = daemonset.get("metadata") or {}
        name = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        if spec.problem is not None:
            raise ValueError(f"DaemonSet {name}: {spec.problem}")
        daemons.append(DaemonSpec(name, spec, tuple(node_selector_terms(pod))))
    return tuple(daemons)
