"""Random clusters, solved by the real solver, judged by the independent checker.

Why: hand-written solver tests cover the cases their authors imagined; 160 random small
clusters (instance types of random shapes, zones, arches and taints; NodePools with random
requirements, taints and limits; existing nodes with pods; DaemonSets; Deployments of pods with
random requests, node selectors, OR-ed node affinity terms, tolerations, zonal and hostname
spreads, hostname and zonal anti-affinity, zonal and hostname self-affinity, zone preferences,
host ports and two namespaces) find the interactions nobody imagined. The checker
(``checker.py``) re-derives every rule on its own, so agreement is evidence and disagreement is
a bug in one of them, with the seed to reproduce it (``Cluster(seed)``). The second half breaks
results on purpose, so a checker that accepts everything cannot pass."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.instancetype import InstanceType, InstanceTypeOverhead, Offering
from karpenter_capi.core.scheduling.solver import Solver
from karpenter_capi.core.scheduling.solver_io import (
    ExistingNode,
    NodePoolOption,
    ProposedNodeClaim,
    SolveResult,
)
from karpenter_capi.core.values.requirements import Requirements
from karpenter_capi.core.values.resources import ResourceList, empty, pod_requests
from karpenter_capi.core.values.taints import Taint
from tests.core.scheduling.checker import check

Pod = dict[str, Any]
ZONE = wellknown.LABEL_TOPOLOGY_ZONE
ARCH = wellknown.LABEL_ARCH
HOSTNAME = wellknown.LABEL_HOSTNAME
CAPACITY_TYPE = wellknown.LABEL_CAPACITY_TYPE
ZONES = ("zone-a", "zone-b", "zone-c")
ARCHES = (wellknown.ARCH_AMD64, wellknown.ARCH_ARM64)
GPU_TAINT = Taint("example.com/gpu", "NoSchedule", "true")
DEDICATED_TAINT = Taint("dedicated", "NoSchedule", "batch")
SEEDS = range(160)


# -- builders ----------------------------------------------------------------------------------


def pod(
    name: str,
    cpu: str = "500m",
    memory: str = "256Mi",
    *,
    labels: dict[str, str] | None = None,
    namespace: str = "default",
    ports: Sequence[int] = (),
    node_name: str | None = None,
    **spec: Any,
) -> Pod:
    container: dict[str, Any] = {
        "name": "app",
        "image": "registry.example/app",
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }
    if ports:
        container["ports"] = [{"containerPort": p, "hostPort": p} for p in ports]
    body: dict[str, Any] = {"containers": [container], **spec}
    if node_name:
        body["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": labels or {},
        },
        "spec": body,
    }


def instance_type(
    name: str,
    cpu: int,
    memory_gib: int,
    *,
    zones: Sequence[str] = ZONES,
    capacity_types: Sequence[str] = (wellknown.CAPACITY_TYPE_ON_DEMAND,),
    arch: str = wellknown.ARCH_AMD64,
    pods: int = 110,
    price: float | None = None,
    taints: Sequence[Taint] = (),
) -> InstanceType:
    base = price if price is not None else cpu * 0.04 + memory_gib * 0.005
    offerings = tuple(
        Offering(zone, ct, round(base * (0.6 if ct == wellknown.CAPACITY_TYPE_SPOT else 1.0), 4))
        for zone in zones
        for ct in capacity_types
    )
    return InstanceType(
        name=name,
        capacity=ResourceList({"cpu": str(cpu), "memory": f"{memory_gib}Gi", "pods": str(pods)}),
        offerings=offerings,
        requirements={
            ARCH: frozenset({arch}),
            wellknown.LABEL_OS: frozenset({"linux"}),
            ZONE: frozenset(zones),
            CAPACITY_TYPE: frozenset(capacity_types),
        },
        overhead=InstanceTypeOverhead(
            kube_reserved=ResourceList({"cpu": "100m", "memory": "200Mi"})
        ),
        taints=tuple(taints),
    )


def claim_of(
    pool: NodePoolOption,
    hostname: str,
    pods: Sequence[Pod],
    types: Sequence[InstanceType],
    *,
    zone: str | None = None,
) -> ProposedNodeClaim:
    """A NodeClaim as the solver would propose it (for the deliberately broken results)."""
    terms = [{"key": HOSTNAME, "operator": "In", "values": [hostname]}]
    if zone:
        terms.append({"key": ZONE, "operator": "In", "values": [zone]})
    requests = ResourceList.sum(pod_requests(p, include_pod_count=True) for p in pods)
    return ProposedNodeClaim(
        nodepool=pool,
        hostname=hostname,
        requirements=pool.requirements.merged(Requirements.from_dicts(terms)),
        instance_types=list(types),
        pods=list(pods),
        requests=requests,
        daemon_requests=empty(),
    )


# -- random clusters ---------------------------------------------------------------------------


class Cluster:
    """One random cluster and workload, reproducible from its seed."""

    def __init__(self, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.types = [self._instance_type(i) for i in range(rng.randint(2, 7))]
        self.nodepools = [self._nodepool(i) for i in range(rng.randint(1, 2))]
        self.existing = [self._existing(i) for i in range(rng.choice((0, 0, 1, 2)))]
        self.daemonsets = [self._daemonset(i) for i in range(rng.choice((0, 1, 2)))]
        self.pods: list[Pod] = []
        while len(self.pods) < rng.randint(10, 60):
            self.pods.extend(self._deployment(len(self.pods)))
        self.max_instance_types = rng.choice((3, 60))

    def _instance_type(self, i: int) -> InstanceType:
        rng = self.rng
        cpu = rng.choice((1, 2, 4, 8, 16))
        zones = sorted(rng.sample(ZONES, rng.randint(1, 3)))
        capacity_types = sorted(
            rng.sample(
                (wellknown.CAPACITY_TYPE_ON_DEMAND, wellknown.CAPACITY_TYPE_SPOT), rng.randint(1, 2)
            )
        )
        return instance_type(
            f"type-{i}",
            cpu,
            cpu * rng.choice((1, 2, 4, 8)),
            zones=zones,
            capacity_types=capacity_types,
            arch=rng.choice(ARCHES),
            pods=rng.choice((4, 8, 29, 110)),
            price=round(cpu * rng.uniform(0.02, 0.06) + rng.uniform(0, 0.05), 4),
            taints=(GPU_TAINT,) if rng.random() < 0.15 else (),
        )

    def _nodepool(self, i: int) -> NodePoolOption:
        rng = self.rng
        terms: list[dict[str, Any]] = []
        if rng.random() < 0.3:
            terms.append({"key": ARCH, "operator": "In", "values": [rng.choice(ARCHES)]})
        if rng.random() < 0.3:
            terms.append({"key": ZONE, "operator": "In", "values": rng.sample(ZONES, 2)})
        if rng.random() < 0.3:
            terms.append(
                {"key": CAPACITY_TYPE, "operator": "In", "values": [wellknown.CAPACITY_TYPE_SPOT]}
            )
        if rng.random() < 0.3:
            terms.append({"key": "team", "operator": "In", "values": [f"team-{i}"]})
        limits = None
        if rng.random() < 0.15:
            limits = ResourceList({"cpu": str(rng.choice((8, 16, 32)))})
        return NodePoolOption(
            name=f"pool-{i}",
            instance_types=tuple(self.types),
            requirements=Requirements.from_dicts(terms),
            weight=rng.choice((0, 10)),
            taints=(DEDICATED_TAINT,) if rng.random() < 0.25 else (),
            limits=limits,
        )

    def _existing(self, i: int) -> ExistingNode:
        rng = self.rng
        name = f"node-{i}"
        labels = {
            HOSTNAME: name,
            ZONE: rng.choice(ZONES),
            ARCH: rng.choice(ARCHES),
            wellknown.LABEL_INSTANCE_TYPE: "existing",
        }
        resident = [
            pod(
                f"resident-{i}-{j}",
                rng.choice(("100m", "500m")),
                "128Mi",
                labels={"app": f"app-{rng.randint(0, 3)}"},
                node_name=name,
                ports=(8080,) if rng.random() < 0.2 else (),
            )
            for j in range(rng.randint(0, 3))
        ]
        requested = ResourceList.sum(pod_requests(p, include_pod_count=True) for p in resident)
        return ExistingNode(
            name=name,
            labels=labels,
            allocatable=ResourceList(
                {"cpu": str(rng.choice((2, 4))), "memory": "8Gi", "pods": "20"}
            ),
            requested=requested,
            taints=(DEDICATED_TAINT,) if rng.random() < 0.2 else (),
            pods=resident,
        )

    def _daemonset(self, i: int) -> dict[str, Any]:
        rng = self.rng
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "agent",
                    "resources": {
                        "requests": {"cpu": rng.choice(("50m", "200m")), "memory": "64Mi"}
                    },
                }
            ]
        }
        if rng.random() < 0.3:
            spec["nodeSelector"] = {ARCH: rng.choice(ARCHES)}
        if rng.random() < 0.3:
            spec["tolerations"] = [{"operator": "Exists"}]
        if rng.random() < 0.2:
            spec["containers"][0]["ports"] = [{"containerPort": 9100, "hostPort": 9100}]
        return {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": f"daemon-{i}", "namespace": "kube-system"},
            "spec": {"template": {"metadata": {"labels": {"daemon": str(i)}}, "spec": spec}},
        }

    def _deployment(self, offset: int) -> list[Pod]:
        """1-10 replicas sharing one random spec, as a Deployment's pods do."""
        rng = self.rng
        app = f"app-{offset}"
        labels = {"app": app}
        spec: dict[str, Any] = {}
        if rng.random() < 0.25:
            spec["nodeSelector"] = {ARCH: rng.choice(ARCHES)}
        if rng.random() < 0.1:
            spec["nodeSelector"] = {**spec.get("nodeSelector", {}), "team": "team-0"}
        if rng.random() < 0.2:
            zones = rng.sample(ZONES, rng.randint(1, 2))
            other = rng.choice(ARCHES)
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": ZONE, "operator": "In", "values": zones}
                                ]
                            },
                            {
                                "matchExpressions": [
                                    {"key": ARCH, "operator": "In", "values": [other]}
                                ]
                            },
                        ]
                    }
                }
            }
        tolerations = []
        if rng.random() < 0.3:
            tolerations.append({"key": "dedicated", "operator": "Equal", "value": "batch"})
        if rng.random() < 0.2:
            tolerations.append({"key": GPU_TAINT.key, "operator": "Exists", "effect": "NoSchedule"})
        if tolerations:
            spec["tolerations"] = tolerations
        spreads = []
        if rng.random() < 0.3:
            spreads.append((ZONE, rng.choice((1, 1, 2))))
        if rng.random() < 0.1:
            spreads.append((HOSTNAME, rng.choice((1, 2))))
        if spreads:
            spec["topologySpreadConstraints"] = [
                {
                    "maxSkew": max_skew,
                    "topologyKey": key,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": labels},
                }
                for key, max_skew in spreads
            ]
        if rng.random() < 0.2:
            key = HOSTNAME if rng.random() < 0.8 else ZONE
            term = {"labelSelector": {"matchLabels": labels}, "topologyKey": key}
            affinity = spec.setdefault("affinity", {})
            affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        elif rng.random() < 0.1:
            key = ZONE if rng.random() < 0.7 else HOSTNAME
            term = {"labelSelector": {"matchLabels": labels}, "topologyKey": key}
            affinity = spec.setdefault("affinity", {})
            affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        if rng.random() < 0.15:  # a preference the solver may have to relax, never break
            preferred = {
                "weight": 50,
                "preference": {
                    "matchExpressions": [{"key": ZONE, "operator": "In", "values": [ZONES[0]]}]
                },
            }
            node_affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
            node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [preferred]
        ports = (8080,) if rng.random() < 0.15 else ()
        namespace = rng.choice(("default", "default", "other"))
        cpu = rng.choice(("50m", "250m", "500m", "1", "1500m", "3"))
        memory = rng.choice(("64Mi", "512Mi", "1Gi", "2Gi", "6Gi"))
        return [
            pod(
                f"{app}-{i}",
                cpu,
                memory,
                labels=dict(labels),
                namespace=namespace,
                ports=ports,
                **spec,
            )
            for i in range(rng.randint(1, 10))
        ]

    def solve(self) -> SolveResult:
        solver = Solver(
            self.nodepools,
            existing_nodes=self.existing,
            daemonsets=self.daemonsets,
            namespaces={},
            max_instance_types=self.max_instance_types,
            clock=FakeClock(),
            timeout_seconds=60.0,
        )
        return solver.solve(self.pods)

    def check(self, result: SolveResult) -> list[str]:
        return check(result, self.pods, self.nodepools, self.existing, self.daemonsets)


@pytest.mark.parametrize("seed", SEEDS)
def test_solver_results_pass_the_independent_checker(seed: int) -> None:
    cluster = Cluster(seed)
    result = cluster.solve()
    violations = cluster.check(result)
    assert violations == [], f"seed {seed}: " + "\n".join(violations)


def test_random_clusters_exercise_the_constraints() -> None:
    """Guard against a generator that drifts into trivial clusters: most pods get placed, and
    the constraints the checker judges all occur."""
    placed = pods = spread = anti = ports = tainted = existing = 0
    for seed in SEEDS:
        cluster = Cluster(seed)
        result = cluster.solve()
        pods += len(cluster.pods)
        placed += sum(len(c.pods) for c in result.new_nodeclaims)
        placed += sum(len(p) for p in result.existing.values())
        existing += sum(len(p) for p in result.existing.values())
        for claim in result.new_nodeclaims:
            tainted += bool(claim.nodepool.taints)
            for p in claim.pods:
                spread += bool(p["spec"].get("topologySpreadConstraints"))
                anti += "podAntiAffinity" in (p["spec"].get("affinity") or {})
                ports += "ports" in p["spec"]["containers"][0]
    assert placed > pods / 2
    assert min(spread, anti, ports, tainted, existing) > 0, (spread, anti, ports, tainted, existing)


# -- the checker fails broken results ----------------------------------------------------------

SMALL = instance_type("small", 2, 4, zones=("zone-a", "zone-b"))
POOL = NodePoolOption(name="default", instance_types=(SMALL,))


def test_a_sound_hand_built_result_passes() -> None:
    pods = [pod("a", "500m"), pod("b", "500m")]
    result = SolveResult(new_nodeclaims=[claim_of(POOL, "n0", pods, [SMALL])])
    assert check(result, pods, [POOL]) == []


def test_an_overfull_claim_is_caught() -> None:
    pods = [pod(f"p{i}", "1") for i in range(3)]  # 3 CPU on a 1900m node
    result = SolveResult(new_nodeclaims=[claim_of(POOL, "n0", pods, [SMALL])])
    violations = check(result, pods, [POOL])
    assert any("exceed small allocatable" in v for v in violations), violations


def test_daemons_left_out_of_the_sums_are_caught() -> None:
    pods = [pod("a", "1700m")]  # fits 1900m alone, not with the 300m daemon
    daemonset = {
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {
            "template": {"spec": {"containers": [{"resources": {"requests": {"cpu": "300m"}}}]}}
        },
    }
    result = SolveResult(new_nodeclaims=[claim_of(POOL, "n0", pods, [SMALL])])
    violations = check(result, pods, [POOL], daemonsets=[daemonset])
    assert any("DaemonSet pod(s) that would run there" in v for v in violations), violations


def test_an_anti_affinity_violation_is_caught() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME}
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    pods = [pod(f"web-{i}", "100m", labels={"app": "web"}, affinity=anti) for i in range(2)]
    together = SolveResult(new_nodeclaims=[claim_of(POOL, "n0", pods, [SMALL])])
    violations = check(together, pods, [POOL])
    assert any("repels pod default/web-" in v for v in violations), violations

    apart = SolveResult(
        new_nodeclaims=[claim_of(POOL, f"n{i}", [p], [SMALL]) for i, p in enumerate(pods)]
    )
    assert check(apart, pods, [POOL]) == []


def test_an_anti_affinity_pod_beside_an_existing_pod_it_repels_is_caught() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE}
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    resident = pod("db-0", labels={"app": "db"}, node_name="old")
    node = ExistingNode(
        name="old",
        labels={HOSTNAME: "old", ZONE: "zone-a"},
        allocatable=ResourceList({"cpu": "4", "memory": "8Gi", "pods": "10"}),
        pods=[resident],
    )
    incoming = [pod("db-1", labels={"app": "db"}, affinity=anti)]
    # Pinned to zone-a: beside db-0. Unpinned: might land in zone-a, so just as wrong.
    for zone in ("zone-a", None):
        result = SolveResult(new_nodeclaims=[claim_of(POOL, "n0", incoming, [SMALL], zone=zone)])
        violations = check(result, incoming, [POOL], [node])
        assert any("repels pod default/db-0" in v for v in violations), (zone, violations)
    elsewhere = SolveResult(new_nodeclaims=[claim_of(POOL, "n0", incoming, [SMALL], zone="zone-b")])
    assert check(elsewhere, incoming, [POOL], [node]) == []


def _spread_pods(count: int) -> list[Pod]:
    constraint = {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}},
    }
    return [
        pod(f"s{i}", "100m", labels={"app": "spread"}, topologySpreadConstraints=[constraint])
        for i in range(count)
    ]


def test_a_zonal_skew_beyond_max_skew_is_caught() -> None:
    pods = _spread_pods(3)
    lopsided = SolveResult(
        new_nodeclaims=[
            claim_of(POOL, "n0", pods[:2], [SMALL], zone="zone-a"),
            claim_of(POOL, "n1", pods[2:], [SMALL], zone="zone-a"),
        ]
    )
    violations = check(lopsided, pods, [POOL])
    assert any("spread by topology.kubernetes.io/zone (maxSkew 1) broken" in v for v in violations)

    balanced = SolveResult(
        new_nodeclaims=[
            claim_of(POOL, "n0", pods[:2], [SMALL], zone="zone-a"),
            claim_of(POOL, "n1", pods[2:], [SMALL], zone="zone-b"),
        ]
    )
    assert check(balanced, pods, [POOL]) == []


def test_a_spread_pod_on_a_claim_free_to_pick_its_zone_is_caught() -> None:
    pods = _spread_pods(1)
    result = SolveResult(new_nodeclaims=[claim_of(POOL, "n0", pods, [SMALL])])
    violations = check(result, pods, [POOL])
    assert any("could land in any of ['zone-a', 'zone-b']" in v for v in violations), violations


def test_a_hostname_spread_counts_a_new_node_as_an_empty_domain() -> None:
    constraint = {
        "maxSkew": 1,
        "topologyKey": HOSTNAME,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "h"}},
    }
    pods = [
        pod(f"h{i}", "100m", labels={"app": "h"}, topologySpreadConstraints=[constraint])
        for i in range(2)
    ]
    together = SolveResult(new_nodeclaims=[claim_of(POOL, "n0", pods, [SMALL])])
    assert any("broken" in v for v in check(together, pods, [POOL]))


def test_untolerated_taints_and_unmet_selectors_are_caught() -> None:
    tainted = replace(POOL, taints=(DEDICATED_TAINT,))
    pods = [pod("a"), pod("b", nodeSelector={ARCH: wellknown.ARCH_ARM64})]
    result = SolveResult(new_nodeclaims=[claim_of(tainted, "n0", pods, [SMALL])])
    violations = check(result, pods, [tainted])
    assert any("taint dedicated=batch:NoSchedule not tolerated" in v for v in violations)
    assert any("pod default/b on small: node requirements" in v for v in violations), violations


def test_an_instance_type_the_pods_cannot_use_is_caught_even_when_not_the_first() -> None:
    arm = instance_type("arm", 4, 8, arch=wellknown.ARCH_ARM64, price=1.0)
    pool = NodePoolOption(name="default", instance_types=(SMALL, arm))
    pods = [pod("amd-only", nodeSelector={ARCH: wellknown.ARCH_AMD64})]
    result = SolveResult(new_nodeclaims=[claim_of(pool, "n0", pods, [SMALL, arm])])
    violations = check(result, pods, [pool])
    assert any("on arm: node requirements" in v for v in violations), violations


def test_colliding_host_ports_are_caught() -> None:
    pods = [pod("a", "100m", ports=(80,)), pod("b", "100m", ports=(80,))]
    result = SolveResult(new_nodeclaims=[claim_of(POOL, "n0", pods, [SMALL])])
    violations = check(result, pods, [POOL])
    assert any("host port TCP/80" in v for v in violations), violations


def test_lost_and_duplicated_pods_are_caught() -> None:
    pods = [pod("a", "100m"), pod("b", "100m"), pod("c", "100m")]
    result = SolveResult(
        new_nodeclaims=[
            claim_of(POOL, "n0", [pods[0]], [SMALL]),
            claim_of(POOL, "n1", [pods[0]], [SMALL]),
        ],
        unschedulable={"default/c": "no room"},
    )
    violations = check(result, pods, [POOL])
    assert any("pod default/a: placed 2 times" in v for v in violations), violations
    assert any("pod default/b: neither placed nor reported unschedulable" in v for v in violations)


def test_breaking_a_real_solver_result_is_caught() -> None:
    """Move every pod of a sound solver result onto its first claim: now it is overfull."""
    cluster = Cluster(7)
    result = cluster.solve()
    assert cluster.check(result) == []
    assert len(result.new_nodeclaims) > 1
    first, *rest = result.new_nodeclaims
    first.pods.extend(p for claim in rest for p in claim.pods)
    broken = SolveResult(new_nodeclaims=[first], unschedulable=result.unschedulable)
    broken.existing = result.existing
    violations = cluster.check(broken)
    assert any("exceed" in v for v in violations), violations


def test_spread_over_several_node_affinity_terms_is_judged_as_upstream_unless_strict() -> None:
    """Two pods in zone-a, one in zone-b, maxSkew 1, placed under the term ``zone In [a, b]``.
    Upstream takes domains from that term: a and b, skew 1. kube-scheduler also honours the
    other term (arm64), under which zone-c (arm64 only) is a domain holding none: skew 2."""
    amd = instance_type("amd", 2, 4, zones=("zone-a", "zone-b"))
    arm = instance_type("arm", 2, 4, zones=("zone-c",), arch=wellknown.ARCH_ARM64)
    pool = NodePoolOption(name="default", instance_types=(amd, arm))
    terms = [
        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-a", "zone-b"]}]},
        {"matchExpressions": [{"key": ARCH, "operator": "In", "values": ["arm64"]}]},
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }
    pods = [p | {"spec": p["spec"] | {"affinity": affinity}} for p in _spread_pods(3)]
    result = SolveResult(
        new_nodeclaims=[
            claim_of(pool, "n0", pods[:2], [amd], zone="zone-a"),
            claim_of(pool, "n1", pods[2:], [amd], zone="zone-b"),
        ]
    )
    assert check(result, pods, [pool]) == []
    strict = check(result, pods, [pool], strict_spread=True)
    assert any("zone-a holds 2 matching pod(s)" in v for v in strict), strict


def test_pods_are_judged_as_submitted_not_as_returned() -> None:
    """A solver returning a relaxed copy without the pod's nodeSelector is still caught."""
    arm = instance_type("arm", 2, 4, arch=wellknown.ARCH_ARM64)
    pool = NodePoolOption(name="default", instance_types=(arm,))
    submitted = pod("a", nodeSelector={ARCH: wellknown.ARCH_AMD64})
    returned = submitted | {
        "spec": {k: v for k, v in submitted["spec"].items() if k != "nodeSelector"}
    }
    result = SolveResult(new_nodeclaims=[claim_of(pool, "n0", [returned], [arm])])
    violations = check(result, [submitted], [pool])
    assert any("pod default/a on arm: node requirements" in v for v in violations), violations
