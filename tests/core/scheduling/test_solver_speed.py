"""The solver's shortcuts: each skips work whose answer is known, and changes no placement.

Why a file of its own: ``test_solver.py`` says where pods go; these say what the solver no
longer has to try to get there (counted, never timed), next to a check that the answer is the
same as trying everything.
"""

from __future__ import annotations

import gc
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from benchmarks import scheduling as bench
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.instancetype import Offering
from karpenter_capi.core.scheduling import solver as solver_module
from karpenter_capi.core.scheduling._solver_view import SolverNode, _price_order, proposed_claim
from karpenter_capi.core.scheduling.claims import (
    ClaimState,
    Fit,
    PodClass,
    PoolState,
    RuledOut,
    TypeInfo,
    cheapest_price,
    next_allowed,
)
from karpenter_capi.core.scheduling.collector import collection_paused
from karpenter_capi.core.scheduling.podspec import PodSpec, PodSpecs
from karpenter_capi.core.scheduling.solver import Solver
from karpenter_capi.core.scheduling.solver_io import ExistingNode
from karpenter_capi.core.values.refusal import Refusal
from karpenter_capi.core.values.requirements import Requirement, Requirements
from tests.core.scheduling.test_solver import _node, _pod, _pool, _spread, _type

ZONE = "topology.kubernetes.io/zone"


def _zonal_affinity(app: str) -> dict[str, Any]:
    term = {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": app}}}
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_zonal_affinity_pods_try_no_claim_held_to_another_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Three spread pods open a claim in each zone; the cache pods (smaller, so placed after
    # them) follow their first replica into its zone.
    web = [
        _pod(
            f"web-{i}",
            "500m",
            labels={"app": "web"},
            topologySpreadConstraints=[_spread(ZONE, "web")],
        )
        for i in range(3)
    ]
    cache = [
        _pod(f"cache-{i}", "100m", labels={"app": "cache"}, affinity=_zonal_affinity("cache"))
        for i in range(6)
    ]
    tried: list[tuple[str, str | None]] = []
    fit_claim = Solver._fit_claim

    def counting(
        self: Solver, claim: ClaimState, pod_class: PodClass, spec: PodSpec
    ) -> Fit | Refusal:
        tried.append((spec.name, claim.requirements.label_value(ZONE)))
        return fit_claim(self, claim, pod_class, spec)

    monkeypatch.setattr(Solver, "_fit_claim", counting)
    result = Solver([_pool()], clock=FakeClock()).solve(web + cache)

    assert not result.unschedulable
    zones = {
        claim.requirements.label_value(ZONE)
        for claim in result.new_nodeclaims
        if any(p["metadata"]["name"].startswith("cache") for p in claim.pods)
    }
    assert len(zones) == 1  # the affinity held
    # After the first replica chose its zone, no other replica was tried on another zone's claim.
    followers = [
        (name, zone) for name, zone in tried if name.startswith("cache") and name != "cache-0"
    ]
    assert followers
    assert {zone for _, zone in followers} == zones


def test_requirements_lookups_answer_as_a_mapping_does() -> None:
    requirements = Requirements([Requirement.new(ZONE, "In", ["zone-a"])])
    fallback = Requirement.new("other", "Exists")
    assert requirements.get(ZONE) == Requirement.new(ZONE, "In", ["zone-a"])
    assert requirements.get("other") is None
    assert requirements.get("other", fallback) is fallback
    assert ZONE in requirements
    assert "other" not in requirements
    assert list(requirements.keys()) == [ZONE]
    assert list(requirements.items()) == [(ZONE, requirements[ZONE])]
    assert list(requirements.values()) == [requirements[ZONE]]


def test_collection_is_paused_during_a_solve_and_resumed_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bool] = []
    place = Solver._place

    def watching(self: Solver, spec: PodSpec) -> Refusal | None:
        seen.append(gc.isenabled())
        return place(self, spec)

    monkeypatch.setattr(Solver, "_place", watching)
    assert gc.isenabled()
    result = Solver([_pool()], clock=FakeClock()).solve([_pod("a"), _pod("b")])
    assert sum(len(c.pods) for c in result.new_nodeclaims) == 2
    assert seen == [False, False]
    assert gc.isenabled()


def test_a_pause_ends_with_the_solve_that_started_it_and_only_if_collection_was_on() -> None:
    """Overlapping solves (a fleet's clusters) must not keep collection off between them."""
    with collection_paused():
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    first = collection_paused()
    second = collection_paused()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.isenabled(), "the pause ended with the solve that started it"
    second.__exit__(None, None, None)
    assert gc.isenabled()
    gc.disable()
    try:
        with collection_paused():
            pass
        assert not gc.isenabled()  # it was off before: left off
    finally:
        gc.enable()


def _counting_reads(
    monkeypatch: pytest.MonkeyPatch, cls: type, name: str, reads: list[object]
) -> None:
    """Count every read of ``cls.name`` (a dataclass field) into ``reads``: the work a loop
    does, where wall time would depend on the machine."""
    slot = f"_counted_{name}"

    def get(obj: Any) -> Any:
        reads.append(obj)
        # Made before the patch: the value is under the field's own name.
        return obj.__dict__[slot] if slot in obj.__dict__ else obj.__dict__[name]

    def put(obj: Any, value: Any) -> None:
        obj.__dict__[slot] = value

    monkeypatch.setattr(cls, name, property(get, put), raising=False)


def test_a_class_walks_past_the_nodes_it_ruled_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # 200 full nodes in name order before 10 with room: each of the 20 pods of one class used
    # to walk past the 200 again (4,000 checks), as every pod of a consolidation simulation
    # walked past thousands of nodes in a 10,000-node cluster.
    full = [_node(f"full-{i:03d}", "2", used="2") for i in range(200)]
    roomy = [_node(f"room-{i:03d}", "4") for i in range(10)]
    reads: list[object] = []
    _counting_reads(monkeypatch, SolverNode, "index", reads)
    pods = [_pod(f"p{i}", "1") for i in range(20)]
    result = Solver([_pool()], existing_nodes=full + roomy, clock=FakeClock()).solve(pods)

    assert sorted(result.existing) == [f"room-{i:03d}" for i in range(5)]  # first fit, in order
    assert not result.new_nodeclaims
    # A few times each node in all (about 650), where it was each full node per pod (4,264).
    assert len(reads) < 4 * len(full) + 10 * len(pods)


def test_a_nominated_pod_is_looked_up_not_scanned_for(monkeypatch: pytest.MonkeyPatch) -> None:
    claims = [
        _node(f"claim-{i:03d}", "4", in_flight=True, nominated=frozenset({f"default/p{i}"}))
        for i in range(50)
    ]
    reads: list[object] = []
    _counting_reads(monkeypatch, ExistingNode, "nominated", reads)
    pods = [_pod(f"p{i}", "3") for i in range(50)]
    result = Solver([_pool()], existing_nodes=claims, clock=FakeClock()).solve(pods)

    assert {n: [p["metadata"]["name"] for p in ps] for n, ps in result.existing.items()} == {
        f"claim-{i:03d}": [f"p{i}"] for i in range(50)
    }
    # Each claim's nominations read a few times in all, not once per pod (2,500).
    assert len(reads) <= 4 * len(claims)


def test_ruled_out_skips_every_run_of_ruled_out_indexes_in_one_step() -> None:
    ruled = RuledOut()
    naive: set[int] = set()
    rng = random.Random(7)
    for _ in range(2000):
        index = rng.randrange(300)
        ruled.add(index)
        naive.add(index)
        start = rng.randrange(310)
        expected = next(i for i in range(start, 400) if i not in naive)
        assert ruled.next(start) == expected
        assert (start in ruled) == (start in naive)
    assert len(ruled) == len(naive)


def test_next_allowed_skips_what_either_rules_out() -> None:
    own, shared = RuledOut(), RuledOut()
    for index in (0, 2, 4, 6):
        own.add(index)
    for index in (1, 3, 5):
        shared.add(index)
    assert next_allowed(0, own, shared) == 7
    assert next_allowed(8, own, shared) == 8


@pytest.mark.parametrize(
    "app",
    [
        # Each hostname anti-affinity pod rules out, for its whole group, the claim it lands
        # on; other classes' claims come in between. Each pod of the group used to test every
        # such claim past the first gap again: 13 claims per pod at 2,000 pods and growing
        # with the pods (quadratic); now about 4.5 at any size.
        "anti-hostname",
        # Zonal self-affinity pods follow the first into its zone: the claims held to the
        # other two zones were each passed over again by every later pod (11 per pod at 2,000
        # pods, growing); now remembered per accepted zones, about 4.5 per pod.
        "affinity-zone",
    ],
)
def test_constrained_pods_look_at_a_bounded_number_of_claims_each(
    monkeypatch: pytest.MonkeyPatch, app: str
) -> None:
    looked: Counter[str] = Counter()
    window = solver_module.claim_window

    def counting(*args: Any) -> Iterator[ClaimState]:
        key = args[2].signature  # the class key: the same for one class, whatever pod
        for claim in window(*args):
            looked[key] += 1
            yield claim

    monkeypatch.setattr(solver_module, "claim_window", counting)
    for count in (1000, 2000):
        looked.clear()
        pods = bench.make_pods(count, "diverse", 1)
        group = [p for p in pods if p["metadata"]["labels"].get("app") == app]
        classes = {PodSpecs().get(p).class_key for p in group}
        result = Solver([bench.nodepool(bench.instance_types())], clock=FakeClock()).solve(pods)
        assert not result.unschedulable
        assert sum(looked[key] for key in classes) <= 6 * len(group)


def test_claims_sharing_a_window_of_types_get_what_checking_each_type_gives() -> None:
    # Price order is not size order here: a cheap small type sits among dear large ones, so a
    # window of types can hold one claim's pods and not another's. Read once per window or
    # type by type, every claim gets the same types, cheapest first.
    rng = random.Random(3)
    types = [
        _type(f"t{i:02d}", cpu, 4 * cpu, price=0.01 * i + 0.001 * cpu)
        for i, cpu in enumerate(rng.choice((1, 2, 4, 8, 16)) for _ in range(40))
    ]
    pods = [_pod(f"p{i}", rng.choice(("100m", "500m", "1", "3"))) for i in range(60)]
    spread = {"topologySpreadConstraints": [_spread(ZONE, "s")]}
    pods += [_pod(f"s{i}", "250m", labels={"app": "s"}, **spread) for i in range(12)]
    solver = Solver([_pool(instance_types=types)], clock=FakeClock(), max_instance_types=5)
    result = solver.solve(pods)

    one_by_one = [proposed_claim(c, solver._resources, 5) for c in solver._claims]
    assert len(result.new_nodeclaims) > 3
    assert [(c.hostname, c.requirements, c.instance_types) for c in result.new_nodeclaims] == [
        (c.hostname, c.requirements, c.instance_types) for c in one_by_one
    ]


def test_claims_narrowed_to_a_zone_list_types_by_that_zones_price() -> None:
    # Prices differ by zone and some offerings carry a label a pod selects: claims held to
    # one zone share each type's price under that zone (_price_order), and get what sorting
    # each claim's own fitting types by their cheapest allowed offering gives.
    rng = random.Random(5)
    types = []
    for i in range(30):
        cpu = rng.choice((1, 2, 4, 8))
        offerings = tuple(
            Offering(zone, "on-demand", round(rng.uniform(0.01, 0.2) * cpu, 3), labels=labels)
            for zone in ("z1", "z2", "z3")
            for labels in ({}, {"rack": "r1"} if i % 3 else {})
        )
        base = _type(f"t{i:02d}", cpu, 4 * cpu, price=0.0, zones=("z1", "z2", "z3"))
        types.append(replace(base, offerings=offerings))
    pods = [
        _pod(f"s{i}", rng.choice(("100m", "500m", "1")), labels={"app": "s"})
        | {"spec": _pod("x")["spec"] | {"topologySpreadConstraints": [_spread(ZONE, "s")]}}
        for i in range(24)
    ]
    not_r1 = {"key": "rack", "operator": "NotIn", "values": ["r1"]}
    racked = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [not_r1]}]
                }
            }
        },
        "topologySpreadConstraints": [_spread(ZONE, "r")],
    }
    pods += [_pod(f"r{i}", "250m", labels={"app": "r"}, **racked) for i in range(6)]
    solver = Solver([_pool(instance_types=types)], clock=FakeClock(), max_instance_types=4)
    result = solver.solve(pods)

    def reference(claim: ClaimState) -> list[str]:
        total = tuple(a + b for a, b in zip(claim.pods_total, claim.daemon, strict=True))
        fitting = [
            t
            for t in claim.types[claim.first :]
            if all(a <= b for a, b in zip(total, t.allocatable, strict=True))
        ]
        fitting.sort(key=lambda t: (cheapest_price(t, claim.requirements), t.instance_type.name))
        return [t.instance_type.name for t in fitting[:4]]

    zones = {c.requirements.label_value(ZONE) for c in result.new_nodeclaims}
    assert len(zones) == 3, "claims are held to each zone"
    assert any(c.requirements.get("rack") is not None for c in result.new_nodeclaims)
    assert [[t.name for t in c.instance_types] for c in result.new_nodeclaims] == [
        reference(c) for c in solver._claims
    ]


def test_price_orders_are_kept_per_what_requirements_say_of_offerings() -> None:
    # One type list, three requirements: two zones, and a zone plus an offering label the
    # cheapest offerings carry. Each gets its own order, from one cache, as sorting gives.
    rng = random.Random(8)
    types = [
        TypeInfo(
            instance_type=replace(
                _type(f"t{i:02d}", 1, 4, price=0.0),
                offerings=tuple(
                    Offering(zone, "on-demand", rng.uniform(0.1, 1.0), labels=labels)
                    for zone in ("z1", "z2")
                    for labels in ({}, {"rack": "r1"})
                ),
            ),
            allocatable=(1000,),
            capacity=(1000,),
            requirements=Requirements(),
            price=0.0,
        )
        for i in range(12)
    ]
    z1, z2 = (Requirements([Requirement.new(ZONE, "In", [z])]) for z in ("z1", "z2"))
    z1_not_r1 = z1.with_requirement(Requirement.new("rack", "NotIn", ["r1"]))
    pool = PoolState(_pool(), Requirements(), types, None, False, False, (1000, 1000))
    orders: dict[int, Any] = {}
    for requirements in (z1, z2, z1_not_r1, z1):
        expected = sorted(
            types[2:], key=lambda t: (cheapest_price(t, requirements), t.instance_type.name)
        )
        assert _price_order(pool, types[2:], requirements, orders) == expected
    assert len(orders[id(pool)][2]) == 3
