"""On a small on-demand catalog, the whole controller's scale-up costs within 2% of the optimum.

The catalog is the usual Cluster API one (`on-demand-mds`: 2, 4, 4 and 16 CPUs, all opted in
from the start here) and the workload its 22 one-CPU batch pods and four 600m web pods. The
test computes the cheapest set of nodes that holds them by exhaustive search over node counts,
with a packing check of its own (no solver, no integer program), and compares what the run
bought once every pod is bound: the emulated kube-scheduler (default-profile scoring) must
realize the plan too, since a stranded pod would cost another node.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

from karpenter_capi.sim.scenario import runner
from karpenter_capi.sim.scenario.schema import Scenario, load_scenario

GI = 1024  # MiB

# (price, cpu in millicores, memory in MiB): the scenario's MachineDeployments, memory less the
# kubeadm eviction threshold (100Mi); the two 4-CPU ones differ only by zone.
NODE_TYPES = (
    (0.104, 2000, 8 * GI - 100),
    (0.192, 4000, 16 * GI - 100),
    (0.768, 16000, 64 * GI - 100),
)
BATCH = (1000, 2 * GI)  # 22 pods
WEB = (600, 512)  # 4 pods


def _all_opted_in() -> Scenario:
    scenario = load_scenario("on-demand-mds")
    manifests: list[dict[str, Any]] = []
    for manifest in scenario.infrastructure.manifests or []:
        if manifest["kind"] == "MachineDeployment":
            labels = manifest["metadata"]["labels"]
            manifest = {
                **manifest,
                "metadata": {
                    **manifest["metadata"],
                    "labels": {**labels, "sim.karpenter-capi.io/pool": "workers"},
                },
            }
        manifests.append(manifest)
    infrastructure = scenario.infrastructure.model_copy(update={"manifests": manifests})
    return scenario.model_copy(update={"infrastructure": infrastructure, "timeline": []})


def _holds(node: tuple[float, int, int], batch: int, web: int) -> bool:
    _, cpu, memory = node
    return batch * BATCH[0] + web * WEB[0] <= cpu and batch * BATCH[1] + web * WEB[1] <= memory


def _packable(nodes: Sequence[tuple[float, int, int]], batch: int, web: int) -> bool:
    """Can these nodes hold ``batch`` and ``web`` pods? Depth first over the nodes."""

    @functools.cache
    def search(index: int, batch_left: int, web_left: int) -> bool:
        if batch_left == 0 and web_left == 0:
            return True
        if index == len(nodes):
            return False
        return any(
            search(index + 1, batch_left - b, web_left - w)
            for b in range(batch_left + 1)
            for w in range(web_left + 1)
            if _holds(nodes[index], b, w)
        )

    return search(0, batch, web)


def _optimum(batch: int, web: int) -> float:
    best = float("inf")
    for counts in itertools.product(range(13), range(8), range(3)):
        nodes = [kind for kind, n in zip(NODE_TYPES, counts, strict=True) for _ in range(n)]
        cost = sum(kind[0] for kind in nodes)
        if cost < best and _packable(tuple(nodes), batch, web):
            best = cost
    return best


def test_the_optimum_search_itself_is_right() -> None:
    # Two one-CPU pods fit one 2-CPU node; a third needs more room.
    assert _optimum(2, 0) == 0.104
    assert round(_optimum(4, 0), 3) == 0.192
    assert round(_optimum(3, 0), 3) == 0.192


def test_the_scale_up_costs_within_two_percent_of_the_exhaustive_optimum() -> None:
    optimum = _optimum(22, 4)
    result = runner.run(_all_opted_in(), until=60, sample_every=60)
    assert result.errors == []
    assert result.pods_bound == result.pods_total == 26
    assert result.cost_per_hour <= 1.02 * optimum, (result.cost_per_hour, optimum)
    # Greedy alone buys two 16-CPU nodes ($1.536/h): far above the optimum.
    assert optimum < 0.9 * 1.536
