"""An independent judge of a ``SolveResult``: would Kubernetes accept every placement in it?

Why: the solver's own tests can only check what its authors thought of, and a bug in a shared
helper (label matching, taint toleration, skew arithmetic) would pass both the solver and a
test built on it. This checker shares nothing with the solver but the data model and quantity
arithmetic (``ResourceList``, ``pod_requests``): label selectors, node selector terms, taints,
topology domains, skew and host ports are re-derived here from the Kubernetes rules, so the
random tests and the benchmark's ``--check`` can compare two implementations.

``check`` returns human-readable violations (empty when the result is sound). What it judges:

* Accounting: every pod is placed at most once, and is either placed or ``unschedulable``;
  nothing unknown is placed; every NodeClaim names a given NodePool and only its types.
* Each proposed NodeClaim, for every instance type it lists (the provider may launch any of
  them): the type has an offering the claim's requirements allow, its labels can meet those
  requirements, every pod's ``nodeSelector`` and required node affinity hold for *every* label
  value the node could come up with (a claim that leaves ``arch`` open for an arm64-only pod
  is wrong even if the cheapest type is arm64), the NodePool's and the type's ``NoSchedule``
  and ``NoExecute`` taints are tolerated, and the pods plus ``daemon_requests`` fit. Types are
  listed cheapest compatible offering first. ``requests`` covers the pods and daemons.
* The node a claim most likely becomes (its first type at its cheapest compatible offering,
  with the type's, the offering's, the NodePool's and the claim's pinned labels, and the
  hostname): the pods plus the DaemonSets that would certainly run there (their pods tolerate
  its taints, with the DaemonSet controller's default tolerations, and their node selectors
  hold) fit its allocatable, and no two pods or daemons take the same host port.
* Existing nodes: the pods placed there fit beside what is already requested, tolerate its
  taints, match its labels, and do not collide on host ports with its pods.
* Required pod anti-affinity, in both directions and across claims and existing nodes: two pods
  conflict when one repels the other and the domains their nodes could land in overlap (a
  claim not pinned to one zone could land in any of its zones; Karpenter records such a pod in
  all of them, so a repelled pod must avoid all of them).
* Required pod affinity: every domain the pod's node could land in holds another matching pod
  on a node pinned to that domain, or the pod selects itself and is the one pod of its term
  allowed to start a domain (no matching pod already ran anywhere). Pods on nodes not pinned
  for the key count nowhere, as upstream records a pod only in a single known domain.
* Topology spread with ``DoNotSchedule``: the placements must be producible one pod at a time
  with ``count(domain) + self - min <= maxSkew`` at each step. Counts are pods matching the
  selector in the owner's namespace on nodes pinned for the key that pass the owner's node
  filter (``nodeAffinityPolicy`` Honor and ``nodeTaintsPolicy`` Ignore by default). ``min``
  follows upstream Karpenter: for ``kubernetes.io/hostname`` it is always 0 (a new node can
  always be launched); for any other key it is the least count over the eligible domains, those
  a NodePool whose taints the pod tolerates can launch for it (an instance type and an
  available offering meeting its node requirements) and those of the result's nodes that meet
  them; 0 with fewer eligible domains than ``minDomains``. An owner on a node not pinned for
  the key is a violation. Whether an order exists is decided by peeling pods off in reverse (a
  pod the constraint does not own can always go last, an owner only if the skew allowed it),
  always from the fullest domain: exact when a group's owners are its only counted pods, and
  erring towards acceptance otherwise.
  Kubernetes and upstream Karpenter read two things differently, so a spread is reported only
  when broken under all four combinations (``strict_spread=True``: kube-scheduler's alone).
  Node requirements: kube-scheduler filters by all required terms at once; upstream places a
  pod under its first term, drops a term only when it fails, and takes domains from the term
  it used, judged here from the terms left in the pod the result returns. Counting on a
  NodeClaim: kube-scheduler sees the node's labels; upstream's ``Counts`` asks whether the
  claim's requirements could meet the filter.
* NodePool ``limits``, as a necessary condition: usage plus the smallest capacity each new
  claim could have stays within them.

Pods are judged as submitted, not as the result returns them (a solver may return copies with
preferences or required terms relaxed away; the scheduler binding them sees the originals).
Out of scope: preferences (they never make a placement invalid), ``minValues``, volume
topology, ``ScheduleAnyway`` spreads. Host ports follow kube-scheduler: app containers and
sidecars, TCP and ``0.0.0.0`` by default, and only ``0.0.0.0`` binds every address.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.instancetype import InstanceType, Offering
from karpenter_capi.core.scheduling.solver_io import (
    ExistingNode,
    NodePoolOption,
    ProposedNodeClaim,
    SolveResult,
)
from karpenter_capi.core.values.requirements import Requirements
from karpenter_capi.core.values.resources import ResourceList, pod_requests

Pod = Mapping[str, Any]
Expr = tuple[str, str, frozenset[str]]
"""One node selector requirement: (key, operator, values); key ``metadata.name`` is a field."""
Possible = Mapping[str, frozenset[str]]
"""Label key -> every value the node could have for it (a key not present: label absent)."""

ZONE = wellknown.LABEL_TOPOLOGY_ZONE
CAPACITY_TYPE = wellknown.LABEL_CAPACITY_TYPE
HOSTNAME = wellknown.LABEL_HOSTNAME
NODEPOOL = wellknown.LABEL_NODEPOOL
_FIELD = "metadata.name"
_NEVER = "<never>"
_ALIASES = {
    "beta.kubernetes.io/arch": wellknown.LABEL_ARCH,
    "beta.kubernetes.io/os": wellknown.LABEL_OS,
    "beta.kubernetes.io/instance-type": wellknown.LABEL_INSTANCE_TYPE,
    "failure-domain.beta.kubernetes.io/zone": ZONE,
    "failure-domain.beta.kubernetes.io/region": wellknown.LABEL_TOPOLOGY_REGION,
}
_DAEMON_TOLERATIONS = (  # what the DaemonSet controller adds to every daemon pod
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)
_BLOCKING = frozenset({"NoSchedule", "NoExecute"})
_WELL_KNOWN = frozenset(
    {
        ZONE,
        CAPACITY_TYPE,
        HOSTNAME,
        NODEPOOL,
        wellknown.LABEL_TOPOLOGY_REGION,
        wellknown.LABEL_INSTANCE_TYPE,
        wellknown.LABEL_ARCH,
        wellknown.LABEL_OS,
        wellknown.LABEL_WINDOWS_BUILD,
    }
)


# -- small helpers ---------------------------------------------------------------------------


def _key(pod: Pod) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _namespace(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("namespace") or "default")


def _labels(pod: Pod) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def _spec(pod: Pod) -> Mapping[str, Any]:
    return pod.get("spec") or {}


def _norm(key: str) -> str:
    return _ALIASES.get(key, key)


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


# -- label selectors (metav1.LabelSelector) --------------------------------------------------


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """``metav1.LabelSelectorAsSelector`` then ``Matches``: a null selector matches nothing,
    an empty one everything."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key = expression.get("key")
        operator = expression.get("operator")
        values = expression.get("values") or ()
        present = key in labels
        if operator == "In":
            ok = present and labels[key] in values
        elif operator == "NotIn":
            ok = not present or labels[key] not in values
        elif operator == "Exists":
            ok = present
        elif operator == "DoesNotExist":
            ok = not present
        else:  # an invalid selector selects nothing
            ok = False
        if not ok:
            return False
    return True


def _with_label_keys(
    selector: Mapping[str, Any] | None,
    labels: Mapping[str, str],
    match_keys: Iterable[str] = (),
    mismatch_keys: Iterable[str] = (),
) -> Mapping[str, Any] | None:
    """``matchLabelKeys``/``mismatchLabelKeys``: the owner's own values, ANDed in."""
    match_keys, mismatch_keys = list(match_keys), list(mismatch_keys)
    if selector is None or not (match_keys or mismatch_keys):
        return selector
    expressions = list(selector.get("matchExpressions") or ())
    for key in match_keys:
        if key in labels:
            expressions.append({"key": key, "operator": "In", "values": [labels[key]]})
    for key in mismatch_keys:
        if key in labels:
            expressions.append({"key": key, "operator": "NotIn", "values": [labels[key]]})
    return {"matchLabels": dict(selector.get("matchLabels") or {}), "matchExpressions": expressions}


# -- node selector terms ---------------------------------------------------------------------


def _value_ok(operator: str, values: frozenset[str], value: str) -> bool:
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return True
    if operator in ("Gt", "Lt", "Gte", "Lte"):
        try:
            number, bound = int(value), int(next(iter(values)))
        except (ValueError, StopIteration):
            return False
        return {
            "Gt": number > bound,
            "Lt": number < bound,
            "Gte": number >= bound,
            "Lte": number <= bound,
        }[operator]
    return False  # DoesNotExist, or the never-matching sentinel


def _absence_ok(operator: str) -> bool:
    return operator in ("NotIn", "DoesNotExist")


def expr_holds(expr: Expr, possible: Possible, node_name: str | None = None) -> bool:
    """True when *every* label value the node could have satisfies ``expr``."""
    key, operator, values = expr
    if operator == _NEVER:
        return False
    if key == _FIELD:  # matchFields: the node's name, unknown for a node not yet launched
        return node_name is not None and _value_ok(operator, values, node_name)
    candidates = possible.get(key)
    if candidates is None:
        return _absence_ok(operator)
    return all(_value_ok(operator, values, value) for value in candidates)


def expr_could_hold(expr: Expr, possible: Possible, open_keys: frozenset[str]) -> bool:
    """True when *some* label value the node could have satisfies ``expr``."""
    key, operator, values = expr
    if operator == _NEVER or key == _FIELD:
        return False
    if key in open_keys:
        return operator != "DoesNotExist"
    candidates = possible.get(key)
    if candidates is None:
        return _absence_ok(operator)
    return any(_value_ok(operator, values, value) for value in candidates)


def _exprs(terms: Iterable[Mapping[str, Any]], *, fields: bool = False) -> list[Expr]:
    return [
        (
            _FIELD if fields else _norm(str(t.get("key"))),
            str(t.get("operator")),
            frozenset(str(v) for v in t.get("values") or ()),
        )
        for t in terms
    ]


def node_alternatives(pod: Pod) -> list[list[Expr]]:
    """``nodeSelector`` AND one of the required node affinity terms (ORed).

    As kube-scheduler: a term with neither expressions nor fields matches no node.
    """
    spec = _spec(pod)
    selector: list[Expr] = [
        (_norm(k), "In", frozenset({str(v)})) for k, v in (spec.get("nodeSelector") or {}).items()
    ]
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return [selector]
    alternatives = []
    for term in terms:
        expressions = _exprs(term.get("matchExpressions") or ())
        expressions += _exprs(term.get("matchFields") or (), fields=True)
        if not expressions:
            expressions = [("", _NEVER, frozenset())]
        alternatives.append(selector + expressions)
    return alternatives


def _alternatives_hold(
    alternatives: Sequence[Sequence[Expr]], possible: Possible, node_name: str | None
) -> bool:
    return any(all(expr_holds(e, possible, node_name) for e in alt) for alt in alternatives)


def _requirement_exprs(requirements: Requirements) -> list[Expr]:
    return _exprs(requirements.to_dicts())


# -- taints ----------------------------------------------------------------------------------


def tolerated(tolerations: Iterable[Mapping[str, Any]], key: str, value: str, effect: str) -> bool:
    """``v1.Toleration.ToleratesTaint`` for any of ``tolerations``."""
    for toleration in tolerations:
        wanted_effect = toleration.get("effect") or ""
        if wanted_effect and wanted_effect != effect:
            continue
        wanted_key = toleration.get("key") or ""
        if (toleration.get("operator") or "Equal") == "Exists":
            if not wanted_key or wanted_key == key:
                return True
        elif wanted_key == key and (toleration.get("value") or "") == value:
            return True
    return False


def _untolerated(tolerations: Sequence[Mapping[str, Any]], taints: Iterable[Any]) -> str | None:
    for taint in taints:
        effect = taint.effect
        if effect in _BLOCKING and not tolerated(tolerations, taint.key, taint.value, effect):
            return f"{taint.key}={taint.value}:{effect}" if taint.value else f"{taint.key}:{effect}"
    return None


def _tolerations(pod: Pod) -> list[Mapping[str, Any]]:
    return list(_spec(pod).get("tolerations") or ())


# -- daemon pods -----------------------------------------------------------------------------


def _daemon_pods(daemonsets: Iterable[Mapping[str, Any]]) -> list[Pod]:
    """The pod each DaemonSet would run, with the controller's default tolerations."""
    pods: list[Pod] = []
    for daemonset in daemonsets:
        spec = daemonset.get("spec") or {}
        template = spec.get("template") if "template" in spec else daemonset
        pod_spec = dict((template or {}).get("spec") or {})
        tolerations = list(pod_spec.get("tolerations") or ())
        defaults = list(_DAEMON_TOLERATIONS)
        if pod_spec.get("hostNetwork"):
            defaults.append(("node.kubernetes.io/network-unavailable", "NoSchedule"))
        for key, effect in defaults:
            tolerations.append({"key": key, "operator": "Exists", "effect": effect})
        pod_spec["tolerations"] = tolerations
        meta = dict((template or {}).get("metadata") or {})
        meta.setdefault("name", (daemonset.get("metadata") or {}).get("name", "daemon"))
        meta.setdefault("namespace", (daemonset.get("metadata") or {}).get("namespace", "default"))
        pods.append({"metadata": meta, "spec": pod_spec})
    return pods


# -- host ports ------------------------------------------------------------------------------


def host_ports(pod: Pod) -> list[tuple[str, str, int]]:
    """(hostIP, protocol, hostPort) of the app containers and sidecars."""
    spec = _spec(pod)
    containers = list(spec.get("containers") or ())
    containers += [
        c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"
    ]
    result = []
    for container in containers:
        for port in container.get("ports") or ():
            number = int(port.get("hostPort") or 0)
            if number:
                ip = port.get("hostIP") or "0.0.0.0"
                result.append((ip, port.get("protocol") or "TCP", number))
    return result


def _ports_collide(a: tuple[str, str, int], b: tuple[str, str, int]) -> bool:
    if a[1:] != b[1:]:
        return False
    return a[0] == b[0] or "0.0.0.0" in (a[0], b[0])


# -- the nodes a result puts pods on ---------------------------------------------------------


@dataclass
class _View:
    """A node as topology sees it: concrete labels, and what each key could still be."""

    name: str
    new: bool
    labels: dict[str, str]
    spans: dict[str, frozenset[str]]
    pending: list[Pod] = field(default_factory=list)
    resident: Sequence[Pod] = ()
    taints: tuple[Any, ...] = ()
    claimed: dict[str, frozenset[str]] | None = None  # what the claim's requirements allow
    unclaimed: frozenset[str] = frozenset()  # well-known keys they leave open

    def domains(self, key: str) -> frozenset[str]:
        """Every value ``key`` could have on this node (empty: the label is absent)."""
        if key in self.spans:
            return self.spans[key]
        value = self.labels.get(key)
        return frozenset() if value is None else frozenset({value})

    def pinned(self, key: str) -> str | None:
        """The one value ``key`` will have, or None (absent, or not decided yet)."""
        domains = self.domains(key)
        return next(iter(domains)) if len(domains) == 1 else None


def _claimed_labels(exprs: Sequence[Expr]) -> dict[str, frozenset[str]]:
    """The values a claim's requirements allow, for the keys they give values (``In``)."""
    by_key: dict[str, list[Expr]] = defaultdict(list)
    for expr in exprs:
        by_key[expr[0]].append(expr)
    result = {}
    for key, key_exprs in by_key.items():
        ins = [values for _, operator, values in key_exprs if operator == "In"]
        if ins:
            allowed = frozenset.intersection(*ins)
            result[key] = frozenset(
                v for v in allowed if all(_value_ok(op, vals, v) for _, op, vals in key_exprs)
            )
    return result


def _view_possible(view: _View) -> dict[str, frozenset[str]]:
    possible = {k: frozenset({v}) for k, v in view.labels.items()}
    possible.update(view.spans)
    return possible


@dataclass
class _SpreadOwner:
    """A pending pod with a ``DoNotSchedule`` spread, and how its domains are judged."""

    pod: Pod
    view: _View
    constraint: Mapping[str, Any]
    signature: str
    selector: Mapping[str, Any] | None
    filter_terms: list[list[Expr]] | None  # nodes whose pods count; None: every node
    domain_terms: list[list[Expr]]  # what an eligible domain must be able to meet
    honor_taints: bool


@dataclass
class _TypeOption:
    instance_type: InstanceType
    offerings: list[Offering]
    possible: dict[str, frozenset[str]]
    price: float


def _offering_allowed(offering: Offering, exprs: Sequence[Expr]) -> bool:
    labels = {ZONE: offering.zone, CAPACITY_TYPE: offering.capacity_type, **offering.labels}
    for key, operator, values in exprs:
        if key in labels and not _value_ok(operator, values, labels[key]):
            return False
    return True


def _possible_labels(
    instance_type: InstanceType,
    offerings: Sequence[Offering],
    exprs: Sequence[Expr],
    hostname: str,
    nodepool: str,
) -> dict[str, frozenset[str]] | str:
    """Every label value a node of this type could have under ``exprs``, or why none."""
    result: dict[str, frozenset[str]] = {}
    by_key: dict[str, list[Expr]] = defaultdict(list)
    for expr in exprs:
        by_key[expr[0]].append(expr)
    fixed = {ZONE, CAPACITY_TYPE, HOSTNAME, NODEPOOL}
    for key in (set(instance_type.requirements) | set(by_key)) - fixed:
        offered = instance_type.requirements.get(key)
        candidates: frozenset[str] | None = offered
        if candidates is None:
            ins = [values for _, operator, values in by_key[key] if operator == "In"]
            if not ins:
                continue  # nothing gives the label a value: the node will not have it
            candidates = frozenset.intersection(*ins)
        allowed = frozenset(
            v for v in candidates if all(_value_ok(op, vals, v) for _, op, vals in by_key[key])
        )
        if not allowed:
            return f"{key}: it offers {sorted(candidates)}, the claim allows none of them"
        result[key] = allowed
    result[ZONE] = frozenset(o.zone for o in offerings)
    result[CAPACITY_TYPE] = frozenset(o.capacity_type for o in offerings)
    shared = set.intersection(*(set(o.labels) for o in offerings)) if offerings else set()
    for key in shared:
        result[key] = frozenset(o.labels[key] for o in offerings)
    result[HOSTNAME] = frozenset({hostname})
    result[NODEPOOL] = frozenset({nodepool})
    return result


# -- the checker -----------------------------------------------------------------------------


class _Checker:
    def __init__(
        self,
        result: SolveResult,
        pods: Sequence[Pod],
        nodepools: Sequence[NodePoolOption],
        *,
        existing_nodes: Sequence[ExistingNode],
        daemonsets: Sequence[Mapping[str, Any]],
        namespaces: Mapping[str, Mapping[str, str]],
        strict_spread: bool,
    ) -> None:
        self.strict_spread = strict_spread
        self.result = result
        self.pods = {_key(p): p for p in pods}
        self.nodepools = {p.name: p for p in nodepools}
        self.existing = {n.name: n for n in existing_nodes}
        self.daemons = _daemon_pods(daemonsets)
        self.namespaces = namespaces
        self.problems: list[str] = []
        self.returned: dict[str, Pod] = {}  # pod key -> the pod as the result holds it
        self.views: list[_View] = []
        self.view_of: dict[str, _View] = {}  # pod key -> node of a pending (placed) pod
        self._alternatives: dict[str, list[list[Expr]]] = {}
        self._requests: dict[str, ResourceList] = {}
        self._launchable_cache: list[tuple[NodePoolOption, dict[str, frozenset[str]]]] | None = None

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def originals(self, placed: Iterable[Pod]) -> list[Pod]:
        """The pods as submitted: a solver may hand back copies with preferences relaxed away
        (or required terms it gave up on), but the scheduler binding them sees the originals.
        The copies are kept: they say which terms upstream's reading of a spread should use."""
        result = []
        for pod in placed:
            self.returned[_key(pod)] = pod
            result.append(self.pods.get(_key(pod), pod))
        return result

    def alternatives(self, pod: Pod) -> list[list[Expr]]:
        key = _key(pod)
        if key not in self._alternatives:
            self._alternatives[key] = node_alternatives(pod)
        return self._alternatives[key]

    def requests(self, pod: Pod) -> ResourceList:
        key = _key(pod)
        if key not in self._requests:
            self._requests[key] = pod_requests(pod, include_pod_count=True)
        return self._requests[key]

    # -- accounting ---------------------------------------------------------------------

    def accounting(self) -> None:
        placements: dict[str, list[str]] = defaultdict(list)
        for claim in self.result.new_nodeclaims:
            for pod in claim.pods:
                placements[_key(pod)].append(f"NodeClaim {claim.hostname}")
        for node_name, placed in self.result.existing.items():
            for pod in placed:
                placements[_key(pod)].append(f"node {node_name}")
        for key, where in placements.items():
            if key not in self.pods:
                self.problem(f"pod {key}: placed on {where[0]} but it was not asked for")
            if len(where) > 1:
                self.problem(f"pod {key}: placed {len(where)} times ({', '.join(where)})")
            if key in self.result.unschedulable:
                self.problem(f"pod {key}: placed on {where[0]} and also reported unschedulable")
        for key in self.pods:
            if key not in placements and key not in self.result.unschedulable:
                self.problem(f"pod {key}: neither placed nor reported unschedulable")

    # -- proposed NodeClaims ------------------------------------------------------------

    def claim(self, claim: ProposedNodeClaim) -> None:
        name = f"NodeClaim {claim.hostname}"
        pool = self.nodepools.get(claim.nodepool.name)
        if pool is None:
            self.problem(f"{name}: NodePool {claim.nodepool.name} was not offered")
            pool = claim.nodepool
        known = {t.name for t in pool.instance_types}
        exprs = _requirement_exprs(pool.requirements) + _requirement_exprs(claim.requirements)
        options: list[_TypeOption] = []
        for instance_type in claim.instance_types:
            if instance_type.name not in known:
                self.problem(f"{name}: lists {instance_type.name}, not a type of {pool.name}")
            offerings = [
                o for o in instance_type.offerings if o.available and _offering_allowed(o, exprs)
            ]
            if not offerings:
                self.problem(f"{name}: {instance_type.name} has no offering the claim allows")
                continue
            possible = _possible_labels(instance_type, offerings, exprs, claim.hostname, pool.name)
            if isinstance(possible, str):
                self.problem(f"{name}: {instance_type.name} cannot meet the claim: {possible}")
                continue
            price = min(o.price for o in offerings)
            options.append(_TypeOption(instance_type, offerings, possible, price))
        if not options:
            self.problem(f"{name}: no instance type it lists can be launched")
            return
        for before, after in itertools.pairwise(options):
            if after.price < before.price - 1e-9:
                self.problem(
                    f"{name}: instance types not cheapest first: {after.instance_type.name} "
                    f"({after.price:g}) after {before.instance_type.name} ({before.price:g})"
                )
                break

        first = options[0]
        offering = min(first.offerings, key=lambda o: (o.price, o.zone, o.capacity_type))
        labels = {k: min(v) for k, v in first.possible.items()}
        labels[ZONE] = offering.zone
        labels[CAPACITY_TYPE] = offering.capacity_type
        labels.update(offering.labels)
        spans: dict[str, frozenset[str]] = {}
        for key in first.possible:
            union = frozenset().union(*(o.possible.get(key, frozenset()) for o in options))
            if all(key in o.possible for o in options):
                spans[key] = union
        taints = (*pool.taints, *first.instance_type.taints)
        placed = self.originals(claim.pods)
        view = _View(claim.hostname, True, labels, spans, placed, (), taints)
        view.claimed = _claimed_labels(exprs)
        view.claimed[HOSTNAME] = frozenset({claim.hostname})
        view.claimed[NODEPOOL] = frozenset({pool.name})
        view.unclaimed = _WELL_KNOWN - set(view.claimed)
        self.views.append(view)
        for pod in placed:
            self.view_of[_key(pod)] = view

        # Every pod, on every type the provider may launch.
        total = ResourceList.sum(self.requests(p) for p in placed)
        for pod in placed:
            for option in options:
                why = self._pod_on_type(pod, pool, option)
                if why:
                    self.problem(f"{name}: pod {_key(pod)} on {option.instance_type.name}: {why}")
                    break
        with_daemons = total.add(claim.daemon_requests)
        for option in options:
            if not with_daemons.fits(option.instance_type.allocatable):
                self.problem(
                    f"{name}: pods {_fmt(total)} + daemons {_fmt(claim.daemon_requests)} exceed "
                    f"{option.instance_type.name} allocatable "
                    f"{_fmt(option.instance_type.allocatable)}"
                )
                break
        for resource in with_daemons:
            if resource != "pods" and claim.requests.milli(resource) < with_daemons.milli(resource):
                self.problem(
                    f"{name}: requests {_fmt(claim.requests)} below its pods and daemons "
                    f"{_fmt(with_daemons)}"
                )
                break

        # The likeliest node: certain daemons, and host ports.
        daemons = [d for d in self.daemons if self._daemon_runs(d, first.possible, taints)]
        daemon_total = ResourceList.sum(self.requests(d) for d in daemons)
        if not total.add(daemon_total).fits(first.instance_type.allocatable):
            self.problem(
                f"{name}: pods {_fmt(total)} + the {len(daemons)} DaemonSet pod(s) that would "
                f"run there {_fmt(daemon_total)} exceed {first.instance_type.name} allocatable "
                f"{_fmt(first.instance_type.allocatable)}"
            )
        self._ports(name, placed, daemons)

    def _pod_on_type(self, pod: Pod, pool: NodePoolOption, option: _TypeOption) -> str | None:
        if not _alternatives_hold(self.alternatives(pod), option.possible, None):
            wanted = [
                [f"{k} {op} {sorted(v)}" for k, op, v in alt] for alt in self.alternatives(pod)
            ]
            could = {k: sorted(v) for k, v in option.possible.items() if k != HOSTNAME}
            return f"node requirements {wanted} not met by every node it may become {could}"
        taint = _untolerated(_tolerations(pod), (*pool.taints, *option.instance_type.taints))
        if taint:
            return f"taint {taint} not tolerated"
        return None

    def _daemon_runs(self, daemon: Pod, possible: Possible, taints: Iterable[Any]) -> bool:
        if _untolerated(_tolerations(daemon), taints):
            return False
        return _alternatives_hold(node_alternatives(daemon), possible, None)

    def _ports(self, name: str, pending: Sequence[Pod], others: Sequence[Pod]) -> None:
        taken: list[tuple[tuple[str, str, int], str, bool]] = []
        for pod in others:
            taken.extend((port, _key(pod), False) for port in host_ports(pod))
        for pod in pending:
            for port in host_ports(pod):
                for other, owner, is_pending in taken:
                    if owner != _key(pod) and _ports_collide(port, other):
                        kind = "pending pod" if is_pending else "pod"
                        self.problem(
                            f"{name}: pod {_key(pod)} host port {port[1]}/{port[2]} on "
                            f"{port[0]} collides with {kind} {owner}"
                        )
                        break
            taken.extend((port, _key(pod), True) for port in host_ports(pod))

    # -- existing nodes -------------------------------------------------------------------

    def existing_node(self, node_name: str, placed: Sequence[Pod]) -> None:
        name = f"node {node_name}"
        placed = self.originals(placed)
        node = self.existing.get(node_name)
        if node is None:
            self.problem(f"{name}: pods placed on a node that does not exist")
            return
        labels = {_norm(k): v for k, v in node.labels.items()}
        labels.setdefault(HOSTNAME, node.name)
        view = _View(node.name, False, labels, {}, list(placed), node.pods, tuple(node.taints))
        self.views.append(view)
        possible = {k: frozenset({v}) for k, v in labels.items()}
        used = node.requested
        if "pods" not in used:
            used = used.add(ResourceList.from_milli({"pods": 1000 * len(node.pods)}))
        total = used.add(ResourceList.sum(self.requests(p) for p in placed))
        if not total.fits(node.allocatable):
            self.problem(
                f"{name}: requested {_fmt(used)} + placed pods exceed allocatable "
                f"{_fmt(node.allocatable)} (total {_fmt(total)})"
            )
        for pod in placed:
            self.view_of[_key(pod)] = view
            if not _alternatives_hold(self.alternatives(pod), possible, node.name):
                self.problem(f"{name}: pod {_key(pod)}: node requirements not met by {labels}")
            taint = _untolerated(_tolerations(pod), node.taints)
            if taint:
                self.problem(f"{name}: pod {_key(pod)}: taint {taint} not tolerated")
        self._ports(name, placed, node.pods)

    def idle_existing_views(self) -> None:
        """Existing nodes that got no pods still hold pods that count for topology."""
        for node in self.existing.values():
            if node.name in self.result.existing:
                continue
            labels = {_norm(k): v for k, v in node.labels.items()}
            labels.setdefault(HOSTNAME, node.name)
            self.views.append(_View(node.name, False, labels, {}, [], node.pods, node.taints))

    # -- limits ---------------------------------------------------------------------------

    def limits(self) -> None:
        for pool in self.nodepools.values():
            if pool.limits is None:
                continue
            claims = [c for c in self.result.new_nodeclaims if c.nodepool.name == pool.name]
            used = pool.usage.as_milli_dict()
            for claim in claims:
                if not claim.instance_types:
                    continue
                for resource in pool.limits:
                    if resource == "nodes":
                        smallest = 1000
                    else:
                        smallest = min(t.capacity.milli(resource) for t in claim.instance_types)
                    used[resource] = used.get(resource, 0) + smallest
            over = [r for r in pool.limits if used.get(r, 0) > pool.limits.milli(r)]
            if over:
                self.problem(
                    f"NodePool {pool.name}: {len(claims)} new NodeClaim(s) take it past its "
                    f"limits on {', '.join(sorted(over))} (at least {_fmt_milli(used)} of "
                    f"{_fmt(pool.limits)})"
                )

    # -- pod (anti-)affinity --------------------------------------------------------------

    def _term_namespaces(self, pod: Pod, term: Mapping[str, Any]) -> Callable[[str], bool]:
        listed = set(term.get("namespaces") or ())
        selector = term.get("namespaceSelector")
        if selector is None:
            allowed = listed or {_namespace(pod)}
            return allowed.__contains__
        if not selector.get("matchLabels") and not selector.get("matchExpressions"):
            return lambda _ns: True
        return lambda ns: ns in listed or selector_matches(selector, self.namespaces.get(ns, {}))

    def _term_selects(self, owner: Pod, term: Mapping[str, Any]) -> Callable[[Pod], bool]:
        selector = _with_label_keys(
            term.get("labelSelector"),
            _labels(owner),
            term.get("matchLabelKeys") or (),
            term.get("mismatchLabelKeys") or (),
        )
        in_namespace = self._term_namespaces(owner, term)

        def selects(pod: Pod) -> bool:
            return in_namespace(_namespace(pod)) and selector_matches(selector, _labels(pod))

        return selects

    def _placed(self) -> list[tuple[Pod, _View, bool]]:
        """Every pod on a node: (pod, node, pending)."""
        result: list[tuple[Pod, _View, bool]] = []
        for view in self.views:
            result.extend((pod, view, True) for pod in view.pending)
            result.extend((pod, view, False) for pod in view.resident)
        return result

    def anti_affinity(self) -> None:
        everyone = self._placed()
        index: dict[tuple[str, str], list[tuple[Pod, _View, bool]]] = defaultdict(list)
        indexed: set[str] = set()
        for pod, view, pending in everyone:
            terms = ((_spec(pod).get("affinity") or {}).get("podAntiAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            ) or []
            for term in terms:
                key = _norm(str(term.get("topologyKey") or ""))
                if key not in indexed:
                    indexed.add(key)
                    for entry in everyone:
                        for domain in entry[1].domains(key):
                            index[(key, domain)].append(entry)
                selects = self._term_selects(pod, term)
                for domain in sorted(view.domains(key)):
                    clash = next(
                        (
                            other
                            for other in index[(key, domain)]
                            if other[0] is not pod and (pending or other[2]) and selects(other[0])
                        ),
                        None,
                    )
                    if clash is not None:
                        self.problem(
                            f"pod {_key(pod)} (on {view.name}) repels pod {_key(clash[0])} "
                            f"(on {clash[1].name}) by {key}, and both may be in {domain}"
                        )
                        break

    def affinity(self) -> None:
        everyone = self._placed()
        found: dict[str, tuple[Counter[str], bool]] = {}
        seeds: dict[str, str] = {}
        for pod, view, pending in everyone:
            if not pending:
                continue
            terms = ((_spec(pod).get("affinity") or {}).get("podAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            ) or []
            for term in terms:
                key = _norm(str(term.get("topologyKey") or ""))
                selects = self._term_selects(pod, term)
                signature = self._term_signature(pod, term, key)
                if signature not in found:
                    per_domain: Counter[str] = Counter()
                    ran_before = False
                    for other, other_view, other_pending in everyone:
                        if selects(other):
                            domain = other_view.pinned(key)
                            if domain is not None:
                                per_domain[domain] += 1
                            ran_before = ran_before or not other_pending
                    found[signature] = (per_domain, ran_before)
                per_domain, ran_before = found[signature]
                domains = view.domains(key)
                if not domains:
                    self.problem(f"pod {_key(pod)}: pod affinity by {key}, node has no {key}")
                    continue
                itself = view.pinned(key) if selects(pod) else None
                missing = sorted(d for d in domains if per_domain[d] - (d == itself) <= 0)
                if not missing:
                    continue
                if itself is not None and signature not in seeds and not ran_before:
                    seeds[signature] = _key(pod)  # the first of its kind may start a domain
                    continue
                started = (
                    f" (pod {seeds[signature]} already started one)" if signature in seeds else ""
                )
                self.problem(
                    f"pod {_key(pod)} (on {view.name}): pod affinity by {key} has no matching "
                    f"pod in {missing}{started}"
                )

    def _term_signature(self, pod: Pod, term: Mapping[str, Any], key: str) -> str:
        selector = _with_label_keys(
            term.get("labelSelector"),
            _labels(pod),
            term.get("matchLabelKeys") or (),
            term.get("mismatchLabelKeys") or (),
        )
        namespaces = (term.get("namespaces"), term.get("namespaceSelector"))
        return _dump([key, _namespace(pod), namespaces, selector])

    # -- topology spread ------------------------------------------------------------------

    def spread(self) -> None:
        owned: list[tuple[Pod, _View, Mapping[str, Any]]] = []
        for view in self.views:
            for pod in view.pending:
                for constraint in _spec(pod).get("topologySpreadConstraints") or ():
                    if (constraint.get("whenUnsatisfiable") or "DoNotSchedule") != "DoNotSchedule":
                        continue
                    owned.append((pod, view, constraint))
                    key = _norm(str(constraint.get("topologyKey") or ""))
                    if view.pinned(key) is None:
                        could = sorted(view.domains(key))
                        self.problem(
                            f"pod {_key(pod)} (on {view.name}): spread by {key} but its node "
                            + (f"could land in any of {could}" if could else f"has no {key}")
                        )
        # Readings: which required node affinity terms filter the owner (all at once, as
        # kube-scheduler; or the one it was placed under, as upstream Karpenter after
        # relaxing the others), and whose pods count on a NodeClaim (the labels its node will
        # have; or, as upstream's Counts, what its requirements leave possible). Broken only
        # if broken in every reading, so no solver faithful to one of them is wrongly accused.
        readings = [(False, False)]
        if not self.strict_spread:
            readings += [(False, True), (True, False), (True, True)]
        verdict: dict[str, str] | None = None
        for chosen_term, loose in readings:
            groups: dict[str, list[_SpreadOwner]] = defaultdict(list)
            for pod, view, constraint in owned:
                owner = self._spread_owner(pod, view, constraint, chosen_term=chosen_term)
                groups[owner.signature].append(owner)
            found: dict[str, str] = {}
            for owners in groups.values():
                found.update(self._spread_group(owners, loose=loose))
            verdict = found if verdict is None else {k: v for k, v in verdict.items() if k in found}
        self.problems.extend((verdict or {}).values())

    def _spread_owner(
        self, pod: Pod, view: _View, constraint: Mapping[str, Any], *, chosen_term: bool
    ) -> _SpreadOwner:
        honor_affinity = (constraint.get("nodeAffinityPolicy") or "Honor") == "Honor"
        honor_taints = (constraint.get("nodeTaintsPolicy") or "Ignore") == "Honor"
        selector = _with_label_keys(
            constraint.get("labelSelector"), _labels(pod), constraint.get("matchLabelKeys") or ()
        )
        alternatives = self.alternatives(pod)
        filter_terms: list[list[Expr]] | None = alternatives if honor_affinity else None
        domain_terms = alternatives if honor_affinity else [[]]
        if chosen_term and honor_affinity:
            # Upstream places a pod under its first required term and drops a term only when
            # it fails; the copy the solver returned keeps the terms it had left. The term the
            # pod got its node under is the first of those its node meets: it alone gives the
            # domains, and it and the later ones filter whose pods count.
            left = node_alternatives(self.returned.get(_key(pod), pod))
            possible = _view_possible(view)
            node_name = None if view.new else view.name
            chosen = next(
                (
                    i
                    for i, alt in enumerate(left)
                    if all(expr_holds(e, possible, node_name) for e in alt)
                ),
                0,
            )
            filter_terms = left[chosen:]
            domain_terms = [left[chosen]]
        signature = _dump(
            {
                "key": _norm(str(constraint.get("topologyKey") or "")),
                "maxSkew": int(constraint.get("maxSkew") or 1),
                "minDomains": constraint.get("minDomains"),
                "selector": selector,
                "namespace": _namespace(pod),
                "filter": filter_terms,
                "domains": domain_terms,
                "tolerations": _tolerations(pod) if honor_taints else None,
            }
        )
        return _SpreadOwner(
            pod, view, constraint, signature, selector, filter_terms, domain_terms, honor_taints
        )

    def _launchable(self) -> list[tuple[NodePoolOption, dict[str, frozenset[str]]]]:
        """Every node the NodePools can launch: (NodePool, its possible labels), per offering."""
        if self._launchable_cache is None:
            self._launchable_cache = []
            for pool in self.nodepools.values():
                pool_exprs = _requirement_exprs(pool.requirements)
                for instance_type in pool.instance_types:
                    for offering in instance_type.offerings:
                        if not offering.available or not _offering_allowed(offering, pool_exprs):
                            continue
                        possible = _possible_labels(
                            instance_type, [offering], pool_exprs, "", pool.name
                        )
                        if not isinstance(possible, str):
                            self._launchable_cache.append((pool, possible))
        return self._launchable_cache

    def _eligible_domains(self, owner: _SpreadOwner, key: str, *, loose: bool) -> set[str]:
        tolerations = _tolerations(owner.pod)
        open_keys = frozenset({HOSTNAME})
        domains: set[str] = set()
        for pool, possible in self._launchable():
            # A node that is only possible, never launched, matters only if this pod could get
            # one: a pool whose taints it does not tolerate adds no domain (whatever the taint
            # policy, which governs how nodes that do exist are counted).
            if _untolerated(tolerations, pool.taints):
                continue
            values = possible.get(key, frozenset())
            if values <= domains:
                continue
            if any(
                all(expr_could_hold(e, possible, open_keys) for e in alt)
                for alt in owner.domain_terms
            ):
                domains |= values
        for view in self.views:
            domain = view.pinned(key)
            if domain is None or domain in domains:
                continue
            if self._passes_filter(view, owner, owner.domain_terms, loose=loose):
                domains.add(domain)
        return domains

    def _passes_filter(
        self, view: _View, owner: _SpreadOwner, terms: list[list[Expr]] | None, *, loose: bool
    ) -> bool:
        if owner.honor_taints and _untolerated(_tolerations(owner.pod), view.taints):
            return False
        if terms is None:
            return True
        if loose and view.claimed is not None:
            return any(
                all(expr_could_hold(e, view.claimed, view.unclaimed) for e in alt) for alt in terms
            )
        node_name = None if view.new else view.name
        return _alternatives_hold(terms, _view_possible(view), node_name)

    def _spread_group(self, owners: list[_SpreadOwner], *, loose: bool) -> dict[str, str]:
        """Owners no placement order could have put where they are: pod key -> why."""
        first = owners[0]
        constraint = first.constraint
        key = _norm(str(constraint.get("topologyKey") or ""))
        max_skew = int(constraint.get("maxSkew") or 1)
        namespace = _namespace(first.pod)
        owned = {id(owner.pod) for owner in owners}

        def selects(pod: Pod) -> bool:
            return _namespace(pod) == namespace and selector_matches(first.selector, _labels(pod))

        counts: dict[str, int] = defaultdict(int)
        owner_at: dict[str, list[tuple[Pod, bool]]] = defaultdict(list)
        others_at: dict[str, int] = defaultdict(int)
        for view in self.views:
            domain = view.pinned(key)
            if domain is None or not self._passes_filter(
                view, first, first.filter_terms, loose=loose
            ):
                continue
            for pod in view.resident:
                if selects(pod):
                    counts[domain] += 1
            for pod in view.pending:
                if id(pod) in owned:
                    counts[domain] += selects(pod)
                    owner_at[domain].append((pod, selects(pod)))
                elif selects(pod):
                    counts[domain] += 1
                    others_at[domain] += 1
        if key == HOSTNAME:
            eligible: set[str] = set()
            floor: int | None = 0
        else:
            eligible = self._eligible_domains(first, key, loose=loose)
            min_domains = constraint.get("minDomains")
            floor = 0 if min_domains is not None and len(eligible) < int(min_domains) else None
        tag = _dump(constraint)
        stuck = self._peel(
            key,
            max_skew,
            counts=counts,
            eligible=eligible,
            floor=floor,
            owner_at=owner_at,
            others_at=others_at,
        )
        return {f"{pod}|{tag}": why for pod, why in stuck.items()}

    def _peel(
        self,
        key: str,
        max_skew: int,
        *,
        counts: dict[str, int],
        eligible: set[str],
        floor: int | None,
        owner_at: dict[str, list[tuple[Pod, bool]]],
        others_at: dict[str, int],
    ) -> dict[str, str]:
        """Take pods off in reverse placement order; report owners no order could place."""
        stuck: dict[str, str] = {}
        low = min((counts.get(d, 0) for d in eligible), default=0) if floor is None else floor

        def lowest_after_removing(domain: str) -> int:
            if floor is not None:
                return floor
            return low - 1 if domain in eligible and counts[domain] == low else low

        def remove_one(domain: str) -> None:
            nonlocal low
            new_low = lowest_after_removing(domain)
            counts[domain] -= 1
            low = new_low

        heap = [(-counts[d], 0 if owner_at[d] else 1, d) for d in set(owner_at) | set(others_at)]
        heapq.heapify(heap)
        while heap:
            negative, _, domain = heapq.heappop(heap)
            if -negative != counts[domain] or not (owner_at[domain] or others_at[domain]):
                continue
            owners = owner_at[domain]
            count = counts[domain]
            plain = next((i for i, (_, counted) in enumerate(owners) if not counted), None)
            counted = next((i for i, (_, counted) in enumerate(owners) if counted), None)
            if plain is not None and count - low <= max_skew:
                owners.pop(plain)
            elif counted is not None and count - lowest_after_removing(domain) <= max_skew:
                owners.pop(counted)
                remove_one(domain)
            elif others_at[domain]:
                others_at[domain] -= 1
                remove_one(domain)
            else:
                for pod, _ in owners:
                    stuck[_key(pod)] = (
                        f"pod {_key(pod)}: spread by {key} (maxSkew {max_skew}) broken: {domain} "
                        f"holds {count} matching pod(s) while the least eligible domain holds "
                        f"{low} ({len(eligible) if floor is None else 'any'} domain(s))"
                    )
                for _, is_counted in owners:
                    if is_counted:
                        remove_one(domain)
                owners.clear()
            if owners or others_at[domain]:
                heapq.heappush(heap, (-counts[domain], 0 if owners else 1, domain))
        return stuck

    # -- everything -----------------------------------------------------------------------

    def run(self) -> list[str]:
        self.accounting()
        for claim in self.result.new_nodeclaims:
            self.claim(claim)
        for node_name, placed in self.result.existing.items():
            self.existing_node(node_name, placed)
        self.idle_existing_views()
        self.limits()
        self.anti_affinity()
        self.affinity()
        self.spread()
        return self.problems


def _fmt(resources: ResourceList) -> str:
    return _fmt_milli(resources.as_milli_dict())


def _fmt_milli(values: Mapping[str, int]) -> str:
    parts = []
    for name in sorted(values):
        value = values[name]
        if name == "memory":
            parts.append(f"memory={value / 1000 / (1 << 20):.0f}Mi")
        elif name == "cpu":
            parts.append(f"cpu={value}m")
        else:
            parts.append(f"{name}={value / 1000:g}")
    return "{" + ", ".join(parts) + "}"


def check(
    result: SolveResult,
    pods: Sequence[Pod],
    nodepools: Sequence[NodePoolOption],
    existing_nodes: Sequence[ExistingNode] = (),
    daemonsets: Sequence[Mapping[str, Any]] = (),
    *,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    strict_spread: bool = False,
) -> list[str]:
    """Every way ``result`` breaks a scheduling rule for ``pods`` (see the module docstring).

    ``namespaces`` maps a namespace to its labels, for affinity terms with a
    ``namespaceSelector``; without it such a selector matches only namespaces it lists.
    ``strict_spread`` judges spreads by kube-scheduler's reading alone (every required node
    affinity term at once, pods counted by their node's labels); by default a spread is broken
    only if upstream Karpenter's readings call it broken too (see ``spread``).
    """
    checker = _Checker(
        result,
        pods,
        nodepools,
        existing_nodes=existing_nodes,
        daemonsets=daemonsets,
        namespaces=namespaces or {},
        strict_spread=strict_spread,
    )
    return checker.run()
