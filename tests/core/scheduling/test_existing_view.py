"""A solve over an ``ExistingView`` minus some nodes answers as one over those nodes listed.

Why: a disruption pass builds the cluster's solver input once and each simulation leaves its
candidates out of it; a simulation must place pods exactly where a solve given the remaining
nodes as a plain list would, topology counts, host ports and nominations included.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.scheduling.existing_view import ExistingView
from karpenter_capi.core.scheduling.podspec import PodSpecs
from karpenter_capi.core.scheduling.solver import Solver
from karpenter_capi.core.scheduling.solver_io import ExistingNode, SolveResult
from karpenter_capi.core.values.resources import ResourceList
from tests.core.scheduling.test_solver import _pod, _pool, _spread

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


def _bound(name: str, node: str, app: str, **spec: Any) -> dict[str, Any]:
    pod = _pod(name, "500m", labels={"app": app}, nodeName=node, **spec)
    pod["metadata"]["uid"] = f"uid-{name}"
    return pod


def _cluster() -> list[ExistingNode]:
    nodes = []
    for i in range(12):
        name = f"node-{i:02d}"
        zone = f"zone-{'abc'[i % 3]}"
        pods = [_bound(f"web-{i}", name, "web")]
        if i % 4 == 0:
            pods.append(
                _bound(
                    f"db-{i}",
                    name,
                    "db",
                    ports=None,
                    containers=[
                        {
                            "name": "db",
                            "ports": [{"containerPort": 5432, "hostPort": 5432}],
                            "resources": {"requests": {"cpu": "500m"}},
                        }
                    ],
                )
            )
        nodes.append(
            ExistingNode(
                name=name,
                labels={HOSTNAME: name, ZONE: zone, "kubernetes.io/arch": "amd64"},
                allocatable=ResourceList.parse({"cpu": "2", "memory": "8Gi", "pods": 110}),
                requested=ResourceList.parse({"cpu": f"{500 * len(pods)}m", "pods": len(pods)}),
                pods=pods,
                nominated=frozenset({"default/pending-0"}) if i == 7 else frozenset(),
            )
        )
    return nodes


def _moving() -> list[dict[str, Any]]:
    spread = {"topologySpreadConstraints": [_spread(ZONE, "web")]}
    port = {
        "containers": [
            {
                "name": "db",
                "ports": [{"containerPort": 5432, "hostPort": 5432}],
                "resources": {"requests": {"cpu": "500m"}},
            }
        ]
    }
    pods = [_pod(f"mv-web-{i}", "500m", labels={"app": "web"}, **spread) for i in range(5)]
    pods += [_pod(f"mv-db-{i}", labels={"app": "db"}, **port) for i in range(3)]
    pods.append(_pod("pending-0", "1"))
    return pods


def _summary(result: SolveResult) -> tuple[object, ...]:
    return (
        {n: [p["metadata"]["name"] for p in pods] for n, pods in result.existing.items()},
        [
            (sorted(p["metadata"]["name"] for p in c.pods), str(c.requirements))
            for c in result.new_nodeclaims
        ],
        dict(result.unschedulable),
    )


def test_a_solve_over_the_view_places_as_one_over_the_remaining_nodes() -> None:
    nodes = _cluster()
    specs = PodSpecs()
    view = ExistingView(nodes, specs)
    for gone in ({"node-00", "node-03"}, {"node-01", "node-02", "node-05", "node-09"}, set()):
        listed = [n for n in nodes if n.name not in gone]
        expected = Solver([_pool()], existing_nodes=listed, clock=FakeClock()).solve(_moving())
        got = Solver(
            [_pool()], existing_nodes=view.without(gone), clock=FakeClock(), pod_specs=specs
        ).solve(_moving())
        assert _summary(got) == _summary(expected)
        # The removed nodes' pods count nowhere: nothing lands on them either.
        assert not gone & set(got.existing)


def test_the_view_is_left_as_it_was_by_a_solve() -> None:
    nodes = _cluster()
    view = ExistingView(nodes, PodSpecs())
    first = Solver([_pool()], existing_nodes=view.without({"node-04"}), clock=FakeClock())
    again = Solver([_pool()], existing_nodes=view.without({"node-04"}), clock=FakeClock())
    assert _summary(first.solve(_moving())) == _summary(again.solve(_moving()))
