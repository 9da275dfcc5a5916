"""The shipped ``static-pool`` scenario: a static NodePool scaled up and down during the run.

What a user would see with ``kubectl get nodes -l karpenter.sh/nodepool=static`` at each
moment: 3 nodes from the start, 5 soon after ``kubectl scale nodepool static --replicas=5`` at
2 minutes, 2 soon after ``--replicas=2`` at 4 minutes; the web pods, which fit on the static
nodes until the last scale-down, then get a node of the dynamic pool and all run again.
"""

from __future__ import annotations

from karpenter_capi.sim.scenario import runner
from karpenter_capi.sim.scenario.schema import load_scenario


def test_the_static_pool_follows_its_replicas_and_the_dynamic_pool_takes_the_rest() -> None:
    result = runner.run(load_scenario("static-pool"), until=360)
    assert result.errors == []
    by_time = {s.at: s for s in result.samples}

    def static_nodes(at: float) -> int:
        return by_time[at].nodes_by_nodepool.get("static", 0)

    assert [static_nodes(t) for t in (30, 60, 90, 120)] == [3, 3, 3, 3]
    assert [static_nodes(t) for t in (165, 195, 225)] == [5, 5, 5]
    assert [static_nodes(t) for t in (285, 330, 360)] == [2, 2, 2]
    # Until the last scale-down the static nodes hold every pod: nothing dynamic is launched.
    assert all(
        "catalog" not in s.nodes_by_nodepool and s.pods_pending == 0
        for s in result.samples
        if 15 <= s.at <= 225
    )
    final = result.samples[-1]
    assert final.pods_bound == 8
    assert final.pods_pending == 0
    assert final.nodes_by_nodepool.get("catalog", 0) >= 1
