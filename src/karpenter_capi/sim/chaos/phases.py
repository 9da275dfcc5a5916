"""The situations the controller is killed in, built from the shipped scenarios.

Each phase brings a cluster to a settled starting state with no kills (idle, at most
``prepare_limit`` seconds; 0 starts from the scenario's objects as loaded), then makes
one change a user would make (``actions``, straight to the API, never killed) and lets the
controller respond until the cluster is idle again (at most ``act_limit`` seconds): that window
is where its writes are counted and cut.
The four cover the controller's write paths: launching (scale-up), deleting empty and
underused nodes (scale-down), replacing drifted nodes (launch before delete, with budgets) and
merging several nodes into fewer (multi-node consolidation).

``phases(pods)`` scales every workload (and every scale action) of a phase so that its busiest
moment has about ``pods`` pods, keeping the shapes and ratios of the shipped scenario.
"""

from __future__ import annotations

from dataclasses import dataclass

from karpenter_capi.sim.scenario.schema import Scenario, TimelineAction, load_scenario

SMALL_PODS = 16  # what the CI test runs: a handful of nodes per phase


@dataclass(frozen=True)
class Phase:
    """``scenario`` run for ``prepare_limit``, then ``actions`` and the response to them (at
    most ``act_limit`` seconds) with the controller's writes counted (and, in a chaos run,
    cut)."""

    name: str
    scenario: Scenario
    prepare_limit: float
    actions: tuple[TimelineAction, ...]
    act_limit: float


def _scaled(scenario: Scenario, pods: int) -> Scenario:
    """``scenario`` with its workloads and scale actions multiplied so its largest workload
    total is ``pods`` (at least one replica where the scenario had any)."""
    peak = max(sum(w.replicas for w in scenario.workloads), 1)
    factor = pods / peak

    def times(replicas: int) -> int:
        return 0 if replicas == 0 else max(1, round(replicas * factor))

    def each(replicas: int | list[int]) -> int | list[int]:
        """A repeating action's replicas are a list taken in turn."""
        return [times(r) for r in replicas] if isinstance(replicas, list) else times(replicas)

    workloads = [w.model_copy(update={"replicas": times(w.replicas)}) for w in scenario.workloads]
    timeline = [
        a.model_copy(update={"replicas": each(a.replicas)})
        if a.action == "scale" and a.replicas is not None
        else a
        for a in scenario.timeline
    ]
    return scenario.model_copy(update={"workloads": workloads, "timeline": timeline})


# The default budget (10% of a NodePool's nodes) lets a small cluster disrupt one node at a
# time, which rules out merging several; the user lifts it for the scale-down.
_ALL_AT_ONCE = TimelineAction(
    at=0,
    action="patch",
    kind="NodePool",
    target="*",
    patch={"spec": {"disruption": {"budgets": [{"nodes": "100%"}]}}},
)


def _small_nodes(scenario: Scenario) -> Scenario:
    """``scenario`` with only its 2- and 4-CPU types, so that even a few pods fill several
    nodes and thinning them leaves several half-empty nodes to merge."""
    catalog = scenario.infrastructure.catalog
    assert catalog is not None
    small = catalog.model_copy(update={"cpus": [c for c in catalog.cpus if c <= 4]})
    infrastructure = scenario.infrastructure.model_copy(update={"catalog": small})
    return scenario.model_copy(update={"infrastructure": infrastructure})


def _scale(workload: str, replicas: int) -> TimelineAction:
    return TimelineAction(at=0, action="scale", target=workload, replicas=replicas)


def phases(pods: int = SMALL_PODS) -> list[Phase]:
    """The four phases at about ``pods`` pods each."""
    grow = _scaled(load_scenario("scale-from-zero"), pods)
    replicas = {w.name: w.replicas for w in grow.workloads}
    drift = _scaled(load_scenario("drift"), pods)
    merge = _small_nodes(_scaled(load_scenario("consolidation"), pods))
    merged = {w.name: max(1, w.replicas // 5) for w in merge.workloads}
    return [
        # Pods on an empty cluster: NodeClaims created, MachineDeployments scaled, Machines
        # bound, nodes registered and initialized.
        Phase("scale-up", grow, 0.0, (), 900.0),
        # The batch job goes and the web tier shrinks to a third: empty nodes deleted, the
        # rest consolidated (scale-down before delete, drain, finalizers).
        Phase(
            "scale-down",
            grow,
            600.0,
            (_scale("batch", 0), _scale("web", max(1, replicas["web"] // 3))),
            900.0,
        ),
        # A Kubernetes upgrade on every MachineDeployment: each node replaced (launch first).
        Phase(
            "drift", drift, 600.0, tuple(a for a in drift.timeline if a.action == "patch"), 900.0
        ),
        # The budget lifted, most pods go at once, spread over every (small) node: several
        # nodes merged into fewer.
        Phase(
            "multi-node-consolidation",
            merge,
            600.0,
            (_ALL_AT_ONCE, *(_scale(name, n) for name, n in merged.items())),
            900.0,
        ),
    ]


PHASES = ("scale-up", "scale-down", "drift", "multi-node-consolidation")
