"""Launches beyond the plan, end to end: kube-scheduler's choices strand a planned pod.

The cheapest plan for a 1-CPU pod and a 3.5-CPU pod on 2- and 4-CPU nodes leaves no slack: the
big pod on the 4-CPU node, the small one on the 2-CPU node. Both nodes become Ready together;
kube-scheduler takes the pods in queue order (same creation time: by name) and scores the
emptier 4-CPU node highest for whichever comes first. When the small pod comes first it takes
the big pod's node, and the big pod needs a NodeClaim of its own: one launch beyond the plan.

That is a control plane before v1.35. From v1.35 (the in-memory API server's release) the
controller nominates each planned pod on its NodeClaim's Node before the Node is Ready, and
kube-scheduler tries the nominated node first: the plan is realized whatever the order.
"""

from __future__ import annotations

import pytest

from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.scenario.plans import BeyondPlan
from karpenter_capi.sim.scenario.result import ScenarioResult
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import parse_scenario


def _before_v1_35(server: InMemoryAPIServer) -> None:
    server.version_info = {"major": "1", "minor": "34", "gitVersion": "v1.34.2"}


def _run(small: str, big: str, *, nominations: bool = False) -> ScenarioResult:
    scenario = parse_scenario(
        {
            "name": "no-slack",
            "description": "a plan with no slack for a small and a big pod",
            "infrastructure": {
                "catalog": {"cpus": [2, 4], "families": {"c": 2}, "zones": ["zone-a"]}
            },
            "workloads": [
                {"name": small, "replicas": 1, "cpu": "1", "memory": "1Gi"},
                {"name": big, "replicas": 1, "cpu": "3500m", "memory": "1Gi"},
            ],
        }
    )
    return run(scenario, until=120, on_cluster=None if nominations else _before_v1_35)


@pytest.fixture(scope="module")
def stranded() -> ScenarioResult:
    return _run(small="web", big="worker")  # "web-..." sorts first: the small pod goes first


def test_the_small_pod_placed_first_strands_the_big_one(stranded: ScenarioResult) -> None:
    assert stranded.errors == []
    assert stranded.pods_bound == 2
    assert stranded.beyond_plan == BeyondPlan(nodeclaims_beyond_plan=1, pods_stranded=1)
    assert stranded.nodeclaims == 3  # two planned, one more for the stranded pod


def test_the_figures_are_in_the_json_and_the_summary(stranded: ScenarioResult) -> None:
    figures = stranded.to_json()
    assert (figures["nodeclaims_beyond_plan"], figures["pods_stranded"]) == (1, 1)
    assert (
        "launches beyond the plan: 1 NodeClaim for 1 stranded pod (planned onto a NodeClaim "
        "still alive, then planned again)"
    ) in stranded.summary()


def test_the_big_pod_placed_first_realizes_the_plan() -> None:
    result = _run(small="web", big="api")  # "api-..." sorts first: the big pod goes first
    assert result.errors == []
    assert result.pods_bound == 2
    assert result.beyond_plan == BeyondPlan(0, 0)
    assert result.nodeclaims == 2
    assert (result.to_json()["nodeclaims_beyond_plan"], result.to_json()["pods_stranded"]) == (0, 0)
    assert "launches beyond the plan: none" in result.summary()


def test_nominated_the_small_pod_placed_first_still_realizes_the_plan() -> None:
    result = _run(small="web", big="worker", nominations=True)
    assert result.errors == []
    assert result.pods_bound == 2
    assert result.beyond_plan == BeyondPlan(0, 0)
    assert result.nodeclaims == 2
