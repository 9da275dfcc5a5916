"""Spread, pod affinity and anti-affinity narrow a node's domains as kube-scheduler would."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.scheduling.podspec import PodSpec, parse_pod
from karpenter_capi.core.scheduling.preferences import relax
from karpenter_capi.core.scheduling.topology import (
    NodeInfo,
    schedule_anyway_constraints,
)
from karpenter_capi.core.scheduling.topology import Topology as SolverTopology
from karpenter_capi.core.scheduling.topology import _topology as topology_module
from karpenter_capi.core.scheduling.topology._narrowing import one_hostname
from karpenter_capi.core.values.refusal import Refusal
from karpenter_capi.core.values.requirements import (
    EMPTY,
    Requirement,
    Requirements,
    node_selector_terms,
)
from karpenter_capi.core.values.taints import Taint

ZONE = wellknown.LABEL_TOPOLOGY_ZONE
HOST = wellknown.LABEL_HOSTNAME
ZONES = ("a", "b", "c")
WEB = {"app": "web"}

Pod = dict[str, Any]
AnyPod = Mapping[str, Any] | PodSpec


def spec_of(pod: AnyPod) -> PodSpec:
    return pod if isinstance(pod, PodSpec) else parse_pod(pod)


class Topology(SolverTopology):
    """The topology as these tests drive it: pods written as JSON, parsed as the solver does."""

    def __init__(
        self,
        *,
        existing_pods: Iterable[tuple[AnyPod, NodeInfo]],
        pending_pods: Iterable[AnyPod],
        **options: Any,
    ) -> None:
        super().__init__(
            existing_pods=[(spec_of(pod), node) for pod, node in existing_pods],
            pending_pods=[spec_of(pod) for pod in pending_pods],
            **options,
        )

    def has_constraints(self, pod: AnyPod) -> bool:  # type: ignore[override]
        return super().has_constraints(spec_of(pod))

    def add_requirements(self, pod: AnyPod, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return super().add_requirements(spec_of(pod), *args, **kwargs)

    def affinity_domains(self, pod: AnyPod, key: str) -> frozenset[str] | None:  # type: ignore[override]
        return super().affinity_domains(spec_of(pod), key)

    def record(self, pod: AnyPod, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().record(spec_of(pod), *args, **kwargs)


def make_pod(
    name: str,
    labels: Mapping[str, str] = WEB,
    *,
    namespace: str = "default",
    spread: Sequence[Mapping[str, Any]] = (),
    affinity: Sequence[Mapping[str, Any]] = (),
    anti: Sequence[Mapping[str, Any]] = (),
    spec: Mapping[str, Any] | None = None,
    uid: str | None = None,
) -> Pod:
    body: dict[str, Any] = dict(spec or {})
    if spread:
        body["topologySpreadConstraints"] = list(spread)
    pod_affinity: dict[str, Any] = dict(body.get("affinity") or {})
    if affinity:
        pod_affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": affinity}
    if anti:
        pod_affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": anti}
    if pod_affinity:
        body["affinity"] = pod_affinity
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if uid is not None:
        meta["uid"] = uid
    return {"metadata": meta, "spec": body}


def spread(key: str = ZONE, selector: Mapping[str, str] = WEB, **extra: Any) -> dict[str, Any]:
    return {
        "maxSkew": 1,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": dict(selector)},
        **extra,
    }


def term(key: str = ZONE, selector: Mapping[str, str] = WEB, **extra: Any) -> dict[str, Any]:
    return {"topologyKey": key, "labelSelector": {"matchLabels": dict(selector)}, **extra}


def node(name: str, zone: str, taints: Iterable[Taint] = (), **labels: str) -> NodeInfo:
    return NodeInfo(name, {HOST: name, ZONE: zone, **labels}, tuple(taints))


def claim(zones: Iterable[str] = ZONES, hostname: str | None = None) -> Requirements:
    """A new NodeClaim's requirements: the zones it may launch in, its hostname placeholder."""
    requirements = [Requirement.new(ZONE, "In", zones)]
    if hostname is not None:
        requirements.append(Requirement.new(HOST, "In", [hostname]))
    return Requirements(requirements)


def pod_requirements(pod: Mapping[str, Any]) -> Requirements:
    return node_selector_terms(pod)[0]


def allowed(
    topology: Topology, pod: Mapping[str, Any], node_requirements: Requirements, key: str = ZONE
) -> set[str]:
    narrowed = topology.add_requirements(pod, pod_requirements(pod), node_requirements)
    assert isinstance(narrowed, Requirements), narrowed
    return set(narrowed[key].values)


def place(topology: Topology, pod: Mapping[str, Any], node_requirements: Requirements) -> str:
    """Narrow, pin the alphabetically first zone left (the solver would pick by price), record."""
    narrowed = topology.add_requirements(pod, pod_requirements(pod), node_requirements)
    assert isinstance(narrowed, Requirements), narrowed
    zone = min(narrowed[ZONE].values)
    topology.record(pod, narrowed.with_requirement(Requirement.new(ZONE, "In", [zone])))
    return zone


def refused(topology: Topology, pod: Mapping[str, Any], node_requirements: Requirements) -> str:
    narrowed = topology.add_requirements(pod, pod_requirements(pod), node_requirements)
    assert isinstance(narrowed, Refusal), f"expected a refusal, got {narrowed}"
    return narrowed.reason


def existing(
    pods: Iterable[tuple[str, NodeInfo]],
    labels: Mapping[str, str] = WEB,
    namespace: str = "default",
) -> list[tuple[Pod, NodeInfo]]:
    return [(make_pod(name, labels, namespace=namespace), info) for name, info in pods]


# --- topology spread ---------------------------------------------------------------------------


def test_zonal_spread_balances_within_max_skew() -> None:
    pods = [make_pod(f"web-{i}", spread=[spread()]) for i in range(9)]
    topology = Topology(domains={ZONE: ZONES}, existing_pods=[], pending_pods=pods)
    counts: Counter[str] = Counter()
    for pod in pods:
        counts[place(topology, pod, claim())] += 1
        assert max(counts[z] for z in ZONES) - min(counts[z] for z in ZONES) <= 1
    assert counts == {"a": 3, "b": 3, "c": 3}


def test_zonal_spread_fills_the_emptiest_zones_first() -> None:
    zone_a = node("n-a", "a")
    pods = [make_pod(f"web-{i}", spread=[spread()]) for i in range(4)]
    topology = Topology(
        domains={ZONE: ZONES},
        existing_pods=existing([("old-1", zone_a), ("old-2", zone_a)]),
        pending_pods=pods,
    )
    assert [place(topology, pod, claim()) for pod in pods] == ["b", "c", "b", "c"]
    assert allowed(topology, make_pod("next", spread=[spread()]), claim(["b", "c"])) == {"b"}


def test_spread_ignores_pods_its_selector_or_namespace_does_not_match() -> None:
    zone_a = node("n-a", "a")
    topology = Topology(
        domains={ZONE: ZONES},
        existing_pods=[
            *existing([("api", zone_a)], labels={"app": "api"}),
            *existing([("web-elsewhere", zone_a)], namespace="other"),
        ],
        pending_pods=[],
    )
    assert allowed(topology, make_pod("web", spread=[spread()]), claim(["a"])) == {"a"}


def test_a_larger_max_skew_tolerates_more_imbalance() -> None:
    zone_a = node("n-a", "a")
    topology = Topology(
        domains={ZONE: ZONES},
        existing_pods=existing([("old-1", zone_a)]),
        pending_pods=[],
    )
    assert allowed(topology, make_pod("web", spread=[spread(maxSkew=2)]), claim(["a"])) == {"a"}
    refused(topology, make_pod("web", spread=[spread()]), claim(["a"]))


def test_min_domains_forces_spreading_onto_new_domains() -> None:
    pods = [make_pod(f"web-{i}", spread=[spread(minDomains=3)]) for i in range(4)]
    topology = Topology(domains={ZONE: ["a", "b"]}, existing_pods=[], pending_pods=pods)
    assert place(topology, pods[0], claim(["a", "b"])) == "a"
    assert place(topology, pods[1], claim(["a", "b"])) == "b"
    # Two eligible zones, fewer than minDomains: the global minimum is 0, so no zone takes a
    # second pod until a third zone exists.
    reason = refused(topology, pods[2], claim(["a", "b"]))
    assert "minDomains 3" in reason
    topology.register_domain(ZONE, "c")
    assert place(topology, pods[2], claim()) == "c"
    assert allowed(topology, pods[3], claim(["a"])) == {"a"}


def test_without_min_domains_two_zones_keep_filling() -> None:
    pods = [make_pod(f"web-{i}", spread=[spread()]) for i in range(4)]
    topology = Topology(domains={ZONE: ["a", "b"]}, existing_pods=[], pending_pods=pods)
    assert [place(topology, pod, claim(["a", "b"])) for pod in pods] == ["a", "b", "a", "b"]


def zone_a_only(policy: str) -> Pod:
    return make_pod(
        "web",
        spread=[spread(nodeAffinityPolicy=policy)],
        spec={"nodeSelector": {ZONE: "a"}},
    )


def test_node_affinity_policy_honor_counts_only_the_zones_the_pod_may_use() -> None:
    topology = Topology(
        domains={ZONE: ZONES},
        existing_pods=existing([("old", node("n-a", "a"))]),
        pending_pods=[],
    )
    # Honor: zone a is the only eligible domain, so it is also the global minimum.
    assert allowed(topology, zone_a_only("Honor"), claim(["a"])) == {"a"}
    # Ignore: the empty zones b and c hold the minimum at 0, and zone a already has one pod.
    assert "maxSkew 1" in refused(topology, zone_a_only("Ignore"), claim(["a"]))


@pytest.mark.parametrize(("policy", "zones"), [("Honor", {"a"}), ("Ignore", {"b"})])
def test_node_affinity_policy_decides_whether_pods_on_other_nodes_count(
    policy: str, zones: set[str]
) -> None:
    other_pool = node("n-a", "a", pool="other")
    topology = Topology(
        domains={ZONE: ["a", "b"]},
        existing_pods=existing([("old", other_pool)]),
        pending_pods=[],
    )
    pod = make_pod(
        "web", spread=[spread(nodeAffinityPolicy=policy)], spec={"nodeSelector": {"pool": "x"}}
    )
    node_requirements = claim(["a", "b"]).merged(pod_requirements(pod))
    assert allowed(topology, pod, node_requirements) == zones


GPU = Taint("gpu", "NoSchedule")


def test_node_taints_policy_honor_leaves_out_zones_only_tainted_nodes_offer() -> None:
    topology = Topology(
        domains={ZONE: ZONES},
        domain_taints={ZONE: {"c": [[GPU]]}},
        existing_pods=existing([("old-a", node("n-a", "a")), ("old-b", node("n-b", "b"))]),
        pending_pods=[],
    )
    honor = make_pod("web", spread=[spread(nodeTaintsPolicy="Honor")])
    assert allowed(topology, honor, claim(["b"])) == {"b"}
    # The default, Ignore, counts the empty tainted zone c as the minimum.
    refused(topology, make_pod("web", spread=[spread()]), claim(["a", "b"]))
    # A pod that tolerates the taint can use zone c, so c counts for it even under Honor.
    tolerant = make_pod(
        "web",
        spread=[spread(nodeTaintsPolicy="Honor")],
        spec={"tolerations": [{"key": "gpu", "operator": "Exists"}]},
    )
    refused(topology, tolerant, claim(["a", "b"]))
    assert allowed(topology, tolerant, claim()) == {"c"}


@pytest.mark.parametrize(("policy", "zones"), [("Honor", {"a"}), ("Ignore", {"b"})])
def test_node_taints_policy_decides_whether_pods_on_untolerated_nodes_count(
    policy: str, zones: set[str]
) -> None:
    dedicated = node("n-a", "a", taints=[Taint("dedicated", "NoSchedule", "batch")])
    topology = Topology(
        domains={ZONE: ["a", "b"]},
        existing_pods=existing([("old", dedicated)]),
        pending_pods=[],
    )
    pod = make_pod("web", spread=[spread(nodeTaintsPolicy=policy)])
    assert allowed(topology, pod, claim(["a", "b"])) == zones


def test_spread_counts_pods_recorded_on_untolerated_nodes_only_under_ignore() -> None:
    honor = make_pod("web-1", spread=[spread(nodeTaintsPolicy="Honor")])
    topology = Topology(domains={ZONE: ["a", "b"]}, existing_pods=[], pending_pods=[honor])
    tainted = claim(["a"])
    topology.record(make_pod("web-0"), tainted, node_taints=[GPU])
    assert allowed(topology, honor, claim(["a", "b"])) == {"a"}
    topology.record(make_pod("web-2"), tainted)
    assert allowed(topology, honor, claim(["a", "b"])) == {"b"}


def test_match_label_keys_count_only_the_pods_of_the_same_revision() -> None:
    old = {"app": "web", "pod-template-hash": "old"}
    zone_a = node("n-a", "a")
    topology = Topology(
        domains={ZONE: ZONES},
        existing_pods=existing([("old-1", zone_a), ("old-2", zone_a)], labels=old),
        pending_pods=[],
    )
    new = {"app": "web", "pod-template-hash": "new"}
    by_revision = make_pod("new", new, spread=[spread(matchLabelKeys=["pod-template-hash"])])
    assert allowed(topology, by_revision, claim(["a"])) == {"a"}
    refused(topology, make_pod("new", new, spread=[spread()]), claim(["a"]))


def test_hostname_spread_refuses_a_full_node_and_takes_a_new_one() -> None:
    pods = [make_pod(f"web-{i}", spread=[spread(HOST)]) for i in range(2)]
    full = node("n-1", "a")
    topology = Topology(
        domains={ZONE: ZONES, HOST: ["n-1"]},
        existing_pods=existing([("old", full)]),
        pending_pods=pods,
    )
    assert "kubernetes.io/hostname" in refused(
        topology, pods[0], Requirements.from_labels(full.labels)
    )
    topology.register_domain(HOST, "claim-1")
    place(topology, pods[0], claim(hostname="claim-1"))
    refused(topology, pods[1], claim(hostname="claim-1"))
    topology.register_domain(HOST, "claim-2")
    assert allowed(topology, pods[1], claim(hostname="claim-2"), key=HOST) == {"claim-2"}


def test_separate_deployments_keep_separate_counts() -> None:
    api = {"app": "api"}
    webs = [make_pod(f"web-{i}", spread=[spread()]) for i in range(3)]
    apis = [make_pod(f"api-{i}", api, spread=[spread(selector=api)]) for i in range(3)]
    topology = Topology(domains={ZONE: ZONES}, existing_pods=[], pending_pods=webs + apis)
    for pod in webs[:2]:
        place(topology, pod, claim())
    assert allowed(topology, apis[0], claim()) == {"a"}
    assert allowed(topology, webs[2], claim()) == {"c"}


def test_own_constraints_pin_the_least_loaded_zone_and_inverse_ones_leave_a_set() -> None:
    zone_b = node("n-b", "b")
    guard = make_pod("guard", {"app": "guard"}, anti=[term()])
    topology = Topology(
        domains={ZONE: ZONES},
        existing_pods=existing(
            [("web-a", node("n-a", "a")), ("web-b1", zone_b), ("web-b2", zone_b)]
        ),
        pending_pods=[guard],
    )
    # maxSkew 2 allows zones a and c; the pod lands where its spread is least loaded, c.
    assert allowed(topology, make_pod("w", spread=[spread(maxSkew=2)]), claim()) == {"c"}
    # With no zone requirement at all the pod still gets one, so record can count it.
    narrowed = topology.add_requirements(make_pod("w", spread=[spread()]), Requirements(), EMPTY)
    assert isinstance(narrowed, Requirements)
    assert narrowed.label_value(ZONE) == "c"
    # Narrowing that only comes from another pod's anti-affinity is left for the solver.
    topology.record(guard, claim(["a"]))
    assert allowed(topology, make_pod("web"), claim()) == {"b", "c"}


def test_schedule_anyway_spreads_count_until_relaxation_drops_them() -> None:
    soft = spread(whenUnsatisfiable="ScheduleAnyway")
    pod = parse_pod(make_pod("web", spread=[soft, spread(HOST)]))
    assert [s.topology_key for s in schedule_anyway_constraints(pod)] == [ZONE]
    only_soft = parse_pod(make_pod("web", spread=[soft]))
    relaxed = relax(only_soft, tolerate_prefer_no_schedule=False)
    assert relaxed is not None
    topology = Topology(domains={ZONE: ZONES}, existing_pods=[], pending_pods=[only_soft])
    assert topology.has_constraints(only_soft)
    assert not topology.has_constraints(relaxed)
    node_requirements = claim()
    assert topology.add_requirements(relaxed, Requirements(), node_requirements) is (
        node_requirements
    )


def test_finished_and_pending_pods_are_not_counted_as_existing() -> None:
    zone_a = node("n-a", "a")
    done = make_pod("done")
    done["status"] = {"phase": "Succeeded"}
    going = make_pod("going")
    going["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    nominated = make_pod("nominated", spread=[spread()], uid="uid-1")
    topology = Topology(
        domains={ZONE: ZONES},
        existing_pods=[(done, zone_a), (going, zone_a), (nominated, zone_a)],
        pending_pods=[make_pod("nominated", spread=[spread()], uid="uid-1")],
    )
    assert allowed(topology, nominated, claim(["a"])) == {"a"}


def test_a_constraint_first_seen_mid_solve_counts_earlier_placements() -> None:
    topology = Topology(domains={ZONE: ZONES}, existing_pods=[], pending_pods=[])
    for name in ("plain-1", "plain-2"):
        topology.record(make_pod(name), claim(["a"]))
    topology.record(make_pod("plain-3"), claim(["b"]))
    assert allowed(topology, make_pod("late", spread=[spread()]), claim()) == {"c"}


def test_record_counts_spread_only_once_the_zone_is_pinned() -> None:
    pod = make_pod("web-1", spread=[spread()])
    topology = Topology(domains={ZONE: ZONES}, existing_pods=[], pending_pods=[pod])
    topology.record(make_pod("web-0"), claim(["a", "b"]))
    assert allowed(topology, pod, claim()) == {"a"}


# --- pod anti-affinity -------------------------------------------------------------------------


def test_zonal_self_anti_affinity_puts_one_pod_per_zone() -> None:
    pods = [make_pod(f"web-{i}", anti=[term()]) for i in range(4)]
    topology = Topology(domains={ZONE: ZONES}, existing_pods=[], pending_pods=pods)
    assert sorted(place(topology, pod, claim()) for pod in pods[:3]) == list(ZONES)
    assert "pod anti-affinity" in refused(topology, pods[3], claim())


def test_an_existing_pods_anti_affinity_keeps_the_pods_it_selects_out_of_its_zone() -> None:
    guard = make_pod("guard", {"app": "guard"}, anti=[term()])
    topology = Topology(
        domains={ZONE: ZONES}, existing_pods=[(guard, node("n-a", "a"))], pending_pods=[]
    )
    web = make_pod("web")
    assert topology.has_constraints(web)
    assert allowed(topology, web, claim()) == {"b", "c"}
    assert "anti-affinity selects this pod" in refused(topology, web, claim(["a"]))
    other = make_pod("api", {"app": "api"})
    assert not topology.has_constraints(other)
    node_requirements = claim()
    assert topology.add_requirements(other, Requirements(), node_requirements) is node_requirements


def test_anti_affinity_of_a_pod_placed_in_this_solve_blocks_the_pods_it_selects() -> None:
    guard = make_pod("guard", {"app": "guard"}, anti=[term()])
    web = make_pod("web")
    topology = Topology(domains={ZONE: ZONES}, existing_pods=[], pending_pods=[guard, web])
    assert allowed(topology, web, claim()) == set(ZONES)
    topology.record(guard, claim(["b"]))
    assert allowed(topology, web, claim()) == {"a", "c"}


def test_anti_affinity_blocks_every_zone_an_unpinned_placement_could_be_in() -> None:
    guard = make_pod("guard", {"app": "guard"}, anti=[term()])
    web = make_pod("web")
    topology = Topology(domains={ZONE: ZONES}, existing_pods=[], pending_pods=[guard, web])
    topology.record(guard, claim(["a", "b"]))
    assert allowed(topology, web, claim()) == {"c"}


def test_anti_affinity_against_existing_pods_it_selects() -> None:
    topology = Topology(
        domains={ZONE: ZONES},
        existing_pods=existing([("db", node("n-b", "b"))], labels={"app": "db"}),
        pending_pods=[],
    )
    web = make_pod("web", anti=[term(selector={"app": "db"})])
    assert allowed(topology, web, claim(["b", "c"])) == {"c"}
    refused(topology, web, claim(["b"]))


def test_preferred_pod_anti_affinity_counts_until_relaxation_drops_it() -> None:
    preferred = {"weight": 10, "podAffinityTerm": term()}
    pod = make_pod(
        "web",
        spec={
            "affinity": {
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [preferred]}
            }
        },
    )
    strict = parse_pod(pod)
    relaxed = relax(strict, tolerate_prefer_no_schedule=False)
    assert relaxed is not None
    assert Topology(domains={ZONE: ZONES}, existing_pods=[], pending_pods=[strict]).has_constraints(
        strict
    )
    topology = Topology(domains={ZONE: ZONES}, existing_pods=[], pending_pods=[relaxed])
    assert not topology.has_constraints(relaxed)


# --- pod affinity ------------------------------------------------------------------------------


def test_self_affinity_on_hostname_lands_every_pod_on_one_node() -> None:
    cache = {"app": "cache"}
    pods = [make_pod(f"cache-{i}", cache, affinity=[term(HOST, cache)]) for i in range(3)]
    topology = Topology(domains={ZONE: ZONES}, existing_pods=[], pending_pods=pods)
    topology.register_domain(HOST, "claim-1")
    topology.register_domain(HOST, "claim-2")
    place(topology, pods[0], claim(hostname="claim-1"))
    for pod in pods[1:]:
        assert "pod affinity" in refused(topology, pod, claim(hostname="claim-2"))
        place(topology, pod, claim(hostname="claim-1"))


def test_affinity_without_a_pod_to_follow_is_refused_unless_self_selecting() -> None:
    topology = Topology(domains={ZONE: ZONES}, existing_pods=[], pending_pods=[])
    web = make_pod("web", affinity=[term(selector={"app": "db"})])
    reason = refused(topology, web, claim())
    assert "topology.kubernetes.io/zone" in reason
    assert "holding a selected pod" in reason
    assert allowed(topology, make_pod("web", affinity=[term()]), claim(["b", "c"])) == {"b"}


@pytest.mark.parametrize(
    "where",
    [
        {"namespaceSelector": {"matchLabels": {"team": "data"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "data"}}},
        {"namespaceSelector": {}},
        {"namespaces": ["data"]},
    ],
)
def test_affinity_to_pods_in_another_namespace(where: dict[str, Any]) -> None:
    topology = Topology(
        domains={ZONE: ZONES},
        existing_pods=existing([("db", node("n-b", "b"))], labels={"app": "db"}, namespace="data"),
        pending_pods=[],
        namespaces={"data": {"team": "data"}, "web": {"team": "web"}},
    )
    web = make_pod("web", namespace="web", affinity=[term(selector={"app": "db"}, **where)])
    assert allowed(topology, web, claim()) == {"b"}


def test_affinity_looks_only_in_the_pods_own_namespace_by_default() -> None:
    topology = Topology(
        domains={ZONE: ZONES},
        existing_pods=existing([("db", node("n-b", "b"))], labels={"app": "db"}, namespace="data"),
        pending_pods=[],
        namespaces={"data": {"team": "data"}, "web": {"team": "web"}},
    )
    web = make_pod("web", namespace="web", affinity=[term(selector={"app": "db"})])
    refused(topology, web, claim())
    elsewhere = {"namespaceSelector": {"matchLabels": {"team": "nobody"}}}
    refused(
        topology,
        make_pod("web", namespace="web", affinity=[term(selector={"app": "db"}, **elsewhere)]),
        claim(),
    )


def test_affinity_and_spread_together_narrow_to_their_common_zones() -> None:
    topology = Topology(
        domains={ZONE: ZONES},
        existing_pods=[
            *existing(
                [("db-a", node("n-a", "a")), ("db-b", node("n-b", "b"))], labels={"app": "db"}
            ),
            *existing([("web-a", node("n-a", "a"))]),
        ],
        pending_pods=[],
    )
    pod = make_pod("web", affinity=[term(selector={"app": "db"})], spread=[spread()])
    assert allowed(topology, pod, claim()) == {"b"}


def test_a_pod_given_as_json_is_read_on_each_call_and_a_parsed_one_by_its_key() -> None:
    topology = Topology(
        domains={ZONE: ZONES},
        existing_pods=existing([("old", node("n-a", "a"))]),
        pending_pods=[],
    )
    pod = make_pod("web")
    assert not topology.has_constraints(pod)
    pod["spec"]["topologySpreadConstraints"] = [spread()]
    refused(topology, pod, claim(["a"]))
    assert topology.has_constraints(parse_pod(pod))
    assert not topology.has_constraints(parse_pod(make_pod("web")))


# --- what a refusal says about the rest of the solve --------------------------------------------


def refusal(topology: Topology, pod: Mapping[str, Any], node_requirements: Requirements) -> Refusal:
    narrowed = topology.add_requirements(
        pod, pod_requirements(pod), node_requirements, explain=False
    )
    assert isinstance(narrowed, Refusal), f"expected a refusal, got {narrowed}"
    return narrowed


def test_a_hostname_anti_affinity_refusal_lasts_for_the_rest_of_the_solve() -> None:
    pods = [make_pod(f"web-{i}", anti=[term(HOST)]) for i in range(2)]
    topology = Topology(domains={ZONE: ZONES}, existing_pods=[], pending_pods=pods)
    node_requirements = claim(["a"], hostname="claim-0")
    topology.register_domain(HOST, "claim-0")
    topology.record(pods[0], node_requirements)
    verdict = refusal(topology, pods[1], node_requirements)
    # The flags survive the reason: the solver relies on them to stop offering this claim.
    assert (verdict.permanent, verdict.local) == (True, True)
    assert verdict.reason == "topology constraint not satisfied (details omitted)"


def test_a_zonal_spread_refusal_may_change_as_other_pods_land() -> None:
    topology = Topology(
        domains={ZONE: ZONES},
        existing_pods=existing([("old-1", node("n-a", "a"))]),
        pending_pods=[],
    )
    verdict = refusal(topology, make_pod("web", spread=[spread()]), claim(["a"]))
    assert (verdict.permanent, verdict.local) == (False, False)


def test_a_permanent_refusal_is_always_local() -> None:
    assert Refusal("taint", permanent=True).local
    assert str(Refusal("no room")) == "no room"


# --- nil and empty selectors --------------------------------------------------------------------


def test_a_nil_spread_selector_selects_no_pod_and_an_empty_one_every_pod() -> None:
    zone_a = node("n-a", "a")
    topology = Topology(
        domains={ZONE: ZONES},
        existing_pods=existing([("old-1", zone_a), ("old-2", zone_a)]),
        pending_pods=[],
    )
    nil = make_pod("web", spread=[{**spread(), "labelSelector": None}])
    empty = make_pod("web", spread=[{**spread(), "labelSelector": {}}])
    # nil counts no pod, so zone a holding two is no skew; {} counts both of them.
    assert allowed(topology, nil, claim(["a"])) == {"a"}
    assert "maxSkew 1" in refused(topology, empty, claim(["a"]))


@pytest.mark.parametrize("max_skew", [1, 2])
def test_the_hostname_fast_path_answers_as_narrowing_each_group_does(
    monkeypatch: pytest.MonkeyPatch, max_skew: int
) -> None:
    # Pods narrowed by hostname spreads and anti-affinities alone are answered for a node in one
    # hostname without narrowing group by group (one_hostname): the same verdict, the same
    # refusal flags, the requirements kept as the very same object.
    solo = {"app": "solo"}
    spreading = [make_pod(f"s-{i}", spread=[spread(HOST, maxSkew=max_skew)]) for i in range(3)]
    repelling = [make_pod(f"r-{i}", solo, anti=[term(HOST, solo)]) for i in range(3)]
    pinned = make_pod("pinned", spread=[spread(HOST)], spec={"nodeSelector": {HOST: "claim-1"}})
    both = make_pod("both", solo, anti=[term(HOST, solo)], spread=[spread(HOST, selector=solo)])
    pods = [*spreading, *repelling, pinned, both]
    topology = Topology(domains={ZONE: ZONES, HOST: []}, existing_pods=[], pending_pods=pods)
    hosts = [f"claim-{i}" for i in range(4)]
    for host in hosts:
        topology.register_domain(HOST, host)
    topology.record(spreading[0], claim(["a"], "claim-0"))
    topology.record(spreading[1], claim(["b"], "claim-0"))
    topology.record(repelling[0], claim(["a"], "claim-1"))
    topology.record(spreading[2], claim(["c"], "claim-2"))
    candidates = [claim(hostname=h) for h in hosts] + [claim(), claim(["a"], "claim-9")]
    quick_answers = []

    def counting(*args: Any) -> Any:
        answer = one_hostname(*args)
        quick_answers.append(answer)
        return answer

    monkeypatch.setattr(topology_module, "one_hostname", counting)
    answers = {}
    for fast in (True, False):
        monkeypatch.setattr(SolverTopology, "hostname_fast_path", fast)
        answers[fast] = [
            topology.add_requirements(pod, pod_requirements(pod), node, explain=False)
            for pod in pods
            for node in candidates
        ]
    assert [type(a) for a in answers[True]] == [type(a) for a in answers[False]]
    for quick, slow in zip(answers[True], answers[False], strict=True):
        if isinstance(slow, Refusal):
            assert isinstance(quick, Refusal)
            assert (quick.permanent, quick.local) == (slow.permanent, slow.local)
        else:
            assert quick == slow
    refusals = sum(isinstance(a, Refusal) for a in answers[True])
    assert 0 < refusals < len(answers[True])  # both answers were given
    # The fast path answered for nodes in one hostname, and left the others to narrowing.
    assert any(isinstance(a, Refusal) for a in quick_answers)
    assert any(isinstance(a, Requirements) for a in quick_answers)
    assert None in quick_answers
