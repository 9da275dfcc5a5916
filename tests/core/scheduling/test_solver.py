"""The solver's decisions, as a user of Karpenter would check them."""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.instancetype import InstanceType, InstanceTypeOverhead, Offering
from karpenter_capi.core.scheduling.solver import Solver
from karpenter_capi.core.scheduling.solver_io import ExistingNode, NodePoolOption, SolveResult
from karpenter_capi.core.values.requirements import Requirements
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.core.values.taints import Taint

ZONES = ("zone-a", "zone-b", "zone-c")


def _type(
    name: str,
    cpu: int,
    memory_gi: int,
    price: float,
    *,
    arch: str = "amd64",
    zones: tuple[str, ...] = ZONES,
    capacity_types: tuple[str, ...] = ("on-demand",),
    pods: int = 110,
    taints: tuple[Taint, ...] = (),
) -> InstanceType:
    return InstanceType(
        name=name,
        capacity=ResourceList.parse({"cpu": cpu, "memory": f"{memory_gi}Gi", "pods": pods}),
        offerings=tuple(
            Offering(zone, ct, price * (0.4 if ct == "spot" else 1.0))
            for zone in zones
            for ct in capacity_types
        ),
        requirements={"kubernetes.io/arch": frozenset({arch}), "kubernetes.io/os": {"linux"}},
        overhead=InstanceTypeOverhead(kube_reserved=ResourceList.parse({"cpu": "100m"})),
        taints=taints,
    )


SMALL = _type("small", 2, 4, 0.10)
MEDIUM = _type("medium", 4, 8, 0.20)
LARGE = _type("large", 8, 16, 0.40)
ARM = _type("arm", 4, 8, 0.15, arch="arm64")
TYPES = (SMALL, MEDIUM, LARGE, ARM)


def _pool(name: str = "default", **kwargs: Any) -> NodePoolOption:
    kwargs.setdefault("instance_types", TYPES)
    return NodePoolOption(name=name, **kwargs)


def _pod(
    name: str,
    cpu: str = "1",
    memory: str = "1Gi",
    *,
    labels: dict[str, str] | None = None,
    namespace: str = "default",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ],
            **spec,
        },
    }


def _solve(pods: list[dict[str, Any]], *pools: NodePoolOption, **kwargs: Any) -> SolveResult:
    solver = Solver(list(pools) or [_pool()], clock=FakeClock(), **kwargs)
    return solver.solve(pods)


def _cheapest_names(result: SolveResult) -> list[str]:
    return sorted(claim.cheapest()[0].name for claim in result.new_nodeclaims)


def test_the_cheapest_instance_type_that_fits_is_chosen() -> None:
    result = _solve([_pod("a", "3")])
    assert _cheapest_names(result) == ["arm"]  # cheaper than medium, and nothing forbids arm64
    amd = _solve([_pod("a", "3", nodeSelector={"kubernetes.io/arch": "amd64"})])
    assert _cheapest_names(amd) == ["medium"]
    claim = amd.new_nodeclaims[0]
    # Every type that fits is listed, cheapest first; the arm64 type is not.
    assert [it.name for it in claim.instance_types] == ["medium", "large"]


def test_zone_and_capacity_type_requirements_narrow_the_offerings() -> None:
    spot = _type("spotty", 4, 8, 0.20, capacity_types=("spot", "on-demand"))
    pool = _pool(instance_types=(spot,))
    on_demand = _pod(
        "od",
        "1",
        nodeSelector={
            "karpenter.sh/capacity-type": "on-demand",
            "topology.kubernetes.io/zone": "zone-b",
        },
    )
    claim = _solve([on_demand], pool).new_nodeclaims[0]
    _, offering = claim.cheapest()
    assert (offering.zone, offering.capacity_type) == ("zone-b", "on-demand")
    anywhere = _solve([_pod("any", "1")], pool).new_nodeclaims[0]
    assert anywhere.cheapest()[1].capacity_type == "spot"


def test_pods_are_packed_tightly_onto_few_nodes() -> None:
    pods = [_pod(f"p{i}", "1", nodeSelector={"kubernetes.io/arch": "amd64"}) for i in range(7)]
    result = _solve(pods)
    assert len(result.new_nodeclaims) == 1
    assert len(result.new_nodeclaims[0].pods) == 7
    assert _cheapest_names(result) == ["large"]


def test_init_container_requests_count_when_larger() -> None:
    pod = _pod("init", "500m")
    pod["spec"]["initContainers"] = [{"name": "warm", "resources": {"requests": {"cpu": "3500m"}}}]
    pod["spec"]["nodeSelector"] = {"kubernetes.io/arch": "amd64"}
    assert _cheapest_names(_solve([pod])) == ["medium"]


def _node(name: str, cpu: str, *, used: str = "0", **kwargs: Any) -> ExistingNode:
    return ExistingNode(
        name=name,
        labels={
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": "zone-a",
            **kwargs.pop("labels", {}),
        },
        allocatable=ResourceList.parse({"cpu": cpu, "memory": "16Gi", "pods": 110}),
        requested=ResourceList.parse({"cpu": used}),
        **kwargs,
    )


def test_existing_nodes_are_used_first_and_a_new_node_only_when_full() -> None:
    node = _node("existing", "4", used="2")
    result = _solve([_pod("a", "1"), _pod("b", "1"), _pod("c", "1")], existing_nodes=[node])
    assert len(result.existing["existing"]) == 2
    assert len(result.new_nodeclaims) == 1
    assert len(result.new_nodeclaims[0].pods) == 1


def test_an_in_flight_nodeclaim_takes_the_pod_instead_of_a_second_node() -> None:
    claim = _node("default-abcde", "4", in_flight=True, nominated=frozenset({"default/a"}))
    result = _solve([_pod("a", "3")], existing_nodes=[claim])
    assert result.existing == {"default-abcde": [result.existing["default-abcde"][0]]}
    assert not result.new_nodeclaims


def test_daemonset_overhead_counts_only_where_the_daemonset_runs() -> None:
    arm_only = {
        "metadata": {"name": "arm-agent", "namespace": "kube-system"},
        "spec": {
            "template": {
                "spec": {
                    "nodeSelector": {"kubernetes.io/arch": "arm64"},
                    "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
                }
            }
        },
    }
    everywhere = {
        "metadata": {"name": "logs", "namespace": "kube-system"},
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "l", "resources": {"requests": {"cpu": "500m"}}}]}
            }
        },
    }
    pod = _pod("a", "1", nodeSelector={"kubernetes.io/arch": "amd64"})
    claim = _solve([pod], daemonsets=[arm_only, everywhere]).new_nodeclaims[0]
    assert claim.daemon_requests.milli("cpu") == 500
    assert claim.requests.milli("cpu") == 1500


def test_the_same_host_port_forces_different_nodes() -> None:
    def web(name: str) -> dict[str, Any]:
        pod = _pod(name, "100m")
        pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        return pod

    result = _solve([web("a"), web("b"), _pod("c", "100m")])
    assert len(result.new_nodeclaims) == 2
    assert sorted(len(c.pods) for c in result.new_nodeclaims) == [1, 2]


def test_preferences_are_relaxed_but_the_last_required_term_never() -> None:
    preferred = _pod("p", "1")
    preferred["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["s390x"]}
                        ]
                    },
                }
            ]
        }
    }
    result = _solve([preferred])
    assert len(result.new_nodeclaims) == 1  # the impossible preference was dropped
    required = _pod("r", "1")
    required["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["s390x"]}
                        ]
                    },
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}
                        ]
                    },
                ]
            }
        }
    }
    relaxed = _solve([required])
    assert _cheapest_names(relaxed) == ["arm"]  # the second OR-term
    only = _pod("o", "1", nodeSelector={"kubernetes.io/arch": "s390x"})
    stuck = _solve([only])
    assert not stuck.new_nodeclaims
    assert "default/o" in stuck.unschedulable


def _spread(key: str, app: str, **extra: Any) -> dict[str, Any]:
    return {
        "maxSkew": 1,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}},
        **extra,
    }


def test_zonal_spread_balances_across_zones() -> None:
    pods = [
        _pod(
            f"w{i}",
            "100m",
            labels={"app": "web"},
            topologySpreadConstraints=[_spread("topology.kubernetes.io/zone", "web")],
        )
        for i in range(9)
    ]
    result = _solve(pods)
    per_zone: dict[str, int] = {}
    for claim in result.new_nodeclaims:
        zone = claim.requirements.label_value("topology.kubernetes.io/zone")
        assert zone is not None
        per_zone[zone] = per_zone.get(zone, 0) + len(claim.pods)
    assert per_zone == {"zone-a": 3, "zone-b": 3, "zone-c": 3}


def test_min_domains_keeps_the_global_minimum_at_zero() -> None:
    def pods(**extra: Any) -> list[dict[str, Any]]:
        spread = _spread("topology.kubernetes.io/zone", "web", maxSkew=2, **extra)
        return [
            _pod(f"w{i}", "100m", labels={"app": "web"}, topologySpreadConstraints=[spread])
            for i in range(9)
        ]

    # Three zones: 3 per zone keeps the skew at 0.
    assert not _solve(pods()).unschedulable
    # minDomains 4 with only three zones: the minimum counts as 0, so a zone takes at most 2.
    limited = _solve(pods(minDomains=4))
    assert sum(len(c.pods) for c in limited.new_nodeclaims) == 6
    assert len(limited.unschedulable) == 3


def test_zonal_anti_affinity_including_the_inverse_case() -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "topology.kubernetes.io/zone",
                    "labelSelector": {"matchLabels": {"app": "db"}},
                }
            ]
        }
    }
    existing_db = _pod("db-0", "100m", labels={"app": "db"}, affinity=anti)
    node = _node("n1", "1", used="1", pods=[existing_db])  # full, in zone-a
    # The new pod has no constraints of its own, but the existing pod's anti-affinity
    # selects it: it must not land in zone-a.
    newcomer = _pod("db-1", "100m", labels={"app": "db"})
    result = _solve([newcomer], existing_nodes=[node])
    zone = result.new_nodeclaims[0].requirements.get("topology.kubernetes.io/zone")
    assert zone is not None
    assert not zone.has("zone-a")
    replicas = [_pod(f"r{i}", "100m", labels={"app": "db"}, affinity=anti) for i in range(4)]
    spread = _solve(replicas)
    assert len(spread.new_nodeclaims) == 3  # one per zone
    assert len(spread.unschedulable) == 1  # no fourth zone


def test_self_affinity_on_hostname_lands_in_one_domain() -> None:
    affinity = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app": "cache"}},
                }
            ]
        }
    }
    pods = [_pod(f"c{i}", "500m", labels={"app": "cache"}, affinity=affinity) for i in range(5)]
    result = _solve(pods)
    assert len(result.new_nodeclaims) == 1
    assert len(result.new_nodeclaims[0].pods) == 5


def test_limits_make_scheduling_partial() -> None:
    pool = _pool(
        instance_types=(MEDIUM,),
        limits=ResourceList.parse({"cpu": "8"}),
    )
    pods = [_pod(f"p{i}", "3") for i in range(4)]
    result = _solve(pods, pool)
    assert len(result.new_nodeclaims) == 2
    assert len(result.unschedulable) == 2
    assert all("limits" in reason for reason in result.unschedulable.values())


def test_heavier_nodepools_are_tried_first() -> None:
    cheap = _pool("cheap", instance_types=(SMALL,), weight=1)
    preferred = _pool("preferred", instance_types=(LARGE,), weight=50)
    result = _solve([_pod("a", "1")], cheap, preferred)
    assert [c.nodepool.name for c in result.new_nodeclaims] == ["preferred"]


def test_a_nodepool_taint_needs_a_toleration() -> None:
    tainted = _pool("gpu", taints=(Taint("nvidia.com/gpu", "NoSchedule"),), weight=10)
    plain = _pool("plain")
    result = _solve([_pod("a", "1")], tainted, plain)
    assert [c.nodepool.name for c in result.new_nodeclaims] == ["plain"]
    tolerant = _pod("t", "1", tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    assert [c.nodepool.name for c in _solve([tolerant], tainted, plain).new_nodeclaims] == ["gpu"]


def test_min_values_fails_when_too_few_types_remain() -> None:
    pool = _pool(
        requirements=Requirements.from_dicts(
            [
                {
                    "key": "node.kubernetes.io/instance-type",
                    "operator": "Exists",
                    "minValues": 3,
                }
            ]
        )
    )
    fits_three = _solve([_pod("a", "1", nodeSelector={"kubernetes.io/arch": "amd64"})], pool)
    assert len(fits_three.new_nodeclaims[0].instance_types) == 3
    only_large = _solve([_pod("b", "6")], pool)
    assert not only_large.new_nodeclaims
    assert "minValues" in only_large.unschedulable["default/b"]


def test_a_pod_that_fits_nowhere_says_why_per_nodepool() -> None:
    result = _solve([_pod("huge", "64")])
    assert "NodePool default" in result.unschedulable["default/huge"]
    assert "large enough" in result.unschedulable["default/huge"]


def test_a_pod_joining_a_claim_drops_the_instance_types_it_cannot_tolerate() -> None:
    gpu = _type("gpu", 8, 16, 0.05, taints=(Taint("nvidia.com/gpu", "NoSchedule"),))
    pool = _pool(instance_types=(gpu, LARGE))
    tolerant = _pod("t", "1", tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    plain = _pod("p", "1")
    result = _solve([tolerant, plain], pool)
    assert len(result.new_nodeclaims) == 1
    assert [it.name for it in result.new_nodeclaims[0].instance_types] == ["large"]


def test_a_preferred_zone_does_not_narrow_what_a_spread_counts() -> None:
    prefer_a = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {
                        "matchExpressions": [
                            {
                                "key": "topology.kubernetes.io/zone",
                                "operator": "In",
                                "values": ["zone-a"],
                            }
                        ]
                    },
                }
            ]
        }
    }
    pods = [
        _pod(
            f"w{i}",
            "100m",
            labels={"app": "web"},
            affinity=prefer_a,
            topologySpreadConstraints=[_spread("topology.kubernetes.io/zone", "web")],
        )
        for i in range(3)
    ]
    result = _solve(pods)
    zones = sorted(
        str(c.requirements.label_value("topology.kubernetes.io/zone"))
        for c in result.new_nodeclaims
        for _ in c.pods
    )
    assert zones == ["zone-a", "zone-b", "zone-c"]  # the preference gives way to the spread


def test_reported_pods_are_the_ones_given_not_relaxed_copies() -> None:
    pod = _pod("p", "1", nodeSelector={})
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "preference": {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["s390x"]}
                        ]
                    },
                }
            ]
        }
    }
    result = _solve([pod])
    assert result.new_nodeclaims[0].pods[0] is pod


class _SlowClock(FakeClock):
    """A clock on which every reading costs a second, so a solve runs into its deadline."""

    def monotonic(self) -> float:
        self.advance(1)
        return super().monotonic()


def test_a_solve_that_hits_its_deadline_keeps_what_it_placed_and_reports_the_rest() -> None:
    pods = [_pod(f"p{i:03d}", "100m") for i in range(300)]
    result = Solver([_pool()], clock=_SlowClock(), timeout_seconds=3).solve(pods)
    assert result.timed_out
    placed = sum(len(c.pods) for c in result.new_nodeclaims)
    assert 0 < placed < 300
    assert len(result.unschedulable) == 300 - placed
    assert all("timed out" in reason for reason in result.unschedulable.values())


def test_an_in_flight_claim_takes_a_pod_whose_zone_it_has_not_decided_yet() -> None:
    # The claim may still launch in zone-a or zone-b: a pod that wants zone-b can count on it,
    # as Karpenter checks requirements, not labels, for claims still launching.
    claim = ExistingNode(
        name="default-abcde",
        labels={"kubernetes.io/hostname": "default-abcde"},
        allocatable=ResourceList.parse({"cpu": "4", "memory": "16Gi", "pods": 110}),
        in_flight=True,
        requirements=Requirements.from_dicts(
            [
                {
                    "key": "topology.kubernetes.io/zone",
                    "operator": "In",
                    "values": ["zone-a", "zone-b"],
                }
            ]
        ),
    )
    wants_b = _pod("b", "1", nodeSelector={"topology.kubernetes.io/zone": "zone-b"})
    wants_c = _pod("c", "1", nodeSelector={"topology.kubernetes.io/zone": "zone-c"})
    result = _solve([wants_b, wants_c], existing_nodes=[claim])
    assert [p["metadata"]["name"] for p in result.existing["default-abcde"]] == ["b"]
    assert [c.pods[0]["metadata"]["name"] for c in result.new_nodeclaims] == ["c"]
