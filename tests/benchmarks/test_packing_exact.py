"""The references ``benchmarks/packing.py`` measures the controller against (``packing_exact``).

The rule-free optimum is the cheapest packing; the rule-obeying one is the cheapest packing the
readiness rule lets the controller take without nominations (``docs/scheduling.md``). On the
issue's two cases they differ exactly where the rule says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import packing as bench
from benchmarks.packing_exact import exact, rule_exact
from karpenter_capi.core.api import wellknown
from karpenter_capi.core.instancetype import InstanceType, Offering
from karpenter_capi.core.values.resources import ResourceList

Pod = dict[str, Any]


def _type(cpu: int, price: float) -> InstanceType:
    return InstanceType(
        name=f"c{cpu}",
        capacity=ResourceList.parse({"cpu": cpu, "memory": f"{4 * cpu}Gi", "pods": 110}),
        offerings=(Offering("zone-a", wellknown.CAPACITY_TYPE_ON_DEMAND, price),),
        requirements={wellknown.LABEL_ARCH: frozenset({"amd64"})},
    )


C2, C4, C8, C16 = _type(2, 0.096), _type(4, 0.192), _type(8, 0.40), _type(16, 0.768)


def _pods(app: str, count: int, cpu: int) -> list[Pod]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{app}-{i}", "namespace": "default"},
            "spec": {
                "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": str(cpu), "memory": "1Gi"}}}
                ]
            },
        }
        for i in range(count)
    ]


def test_a_plan_the_rule_refuses_is_not_the_rule_obeying_optimum() -> None:
    # Two 2-CPU pods queued before a 3-CPU pod: two 4-CPU nodes ($0.384/h) are the cheapest
    # packing, but Ready together LeastAllocated puts a 2-CPU pod on each and strands the
    # 3-CPU one (a third node: worst $0.576/h, above greedy's one 8-CPU node at $0.40/h).
    pods = _pods("a", 2, 2) + _pods("b", 1, 3)
    catalog = [C2, C4, C8, C16]
    assert exact(catalog, pods, 0.40, None) == (pytest.approx(0.384), True)
    references = rule_exact(catalog, pods, [pods], [pods], None)
    assert (references.cheapest.value, references.cheapest.proven) == (pytest.approx(0.40), True)
    assert (references.robust.value, references.robust.proven) == (pytest.approx(0.40), True)
    assert references.robust.cuts >= 1


def test_a_plan_whose_worst_realization_beats_greedys_is_the_rule_obeying_optimum() -> None:
    # Three 1-CPU pods queued before a 3-CPU pod: 4 + 2 CPUs ($0.288/h) may strand the big pod
    # (worst $0.48/h), still below greedy's one 16-CPU node ($0.768/h): the rule admits it.
    pods = _pods("a", 3, 1) + _pods("b", 1, 3)
    plan = [pods[:2], pods[2:]]  # two 1-CPU pods on 2 CPUs, the rest on 4
    references = rule_exact([C2, C4, C16], pods, [pods], plan, None)
    assert (references.cheapest.value, references.cheapest.proven) == (pytest.approx(0.288), True)
    # Weighed by worst realization, two 4-CPU nodes ($0.384/h) are best: the 3-CPU pod fits
    # beside one 1-CPU pod whichever way they spread, so nothing is stranded.
    assert (references.robust.value, references.robust.proven) == (pytest.approx(0.384), True)
    assert references.worst == pytest.approx(0.48)  # the plan given may strand the big pod


def _row(seed: int, optimum: float, proven: bool, robust: float, rule_proven: bool) -> str:
    return json.dumps(
        {
            "seed": seed,
            "types": 5,
            "pods": 30,
            "extras": "",
            "greedy": 2.0,
            "optimum": optimum,
            "proven": proven,
            "rule_optimum": robust,
            "robust_optimum": robust,
            "rule_proven": rule_proven,
        }
    )


def test_earlier_runs_references_keep_the_proven_optimum_else_the_largest_bound(
    tmp_path: Path,
) -> None:
    # A run that changes only the controller reads the exact references of earlier runs
    # (--references) instead of solving them again: a proven optimum wins over any bound, and
    # of bounds the largest (each is a lower bound on the optimum).
    first, second = tmp_path / "a.rows", tmp_path / "b.rows"
    first.write_text(_row(1, 1.5, False, 1.6, False) + "\n" + _row(2, 1.7, True, 1.8, True) + "\n")
    second.write_text(_row(1, 1.55, False, 1.65, True) + "\n" + _row(2, 1.9, False, 1.9, False))
    references = bench.load_references([str(first), str(second)])
    assert (references[1]["optimum"], references[1]["proven"]) == (1.55, False)
    assert (references[1]["robust_optimum"], references[1]["rule_proven"]) == (1.65, True)
    assert (references[2]["optimum"], references[2]["proven"]) == (1.7, True)
    assert (references[2]["rule_optimum"], references[2]["rule_cheapest_proven"]) == (1.8, True)


def test_references_of_another_instance_are_refused(tmp_path: Path) -> None:
    rows = tmp_path / "a.rows"
    other = json.loads(_row(1, 1.5, True, 1.6, True)) | {"greedy": 2.5}
    rows.write_text(_row(1, 1.5, True, 1.6, True) + "\n" + json.dumps(other) + "\n")
    with pytest.raises(SystemExit, match="seed 1 is another instance"):
        bench.load_references([str(rows)])
