"""The figures a scenario run produces, and their JSON form.

Kept apart from the runner so that what a run *reports* (the documented ``simulate --json``
fields, the samples the HTML report plots, the summary table) can be read, tested and extended
without the machinery that wires controllers together.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from karpenter_capi.sim.scenario.plans import BeyondPlan

# NodeClaim states in lifecycle order; each NodeClaim is in exactly one (its latest).
NODECLAIM_STATES = ("launching", "launched", "registered", "initialized", "deleting")


@dataclass(frozen=True)
class Sample:
    """The cluster at one virtual time.

    ``nodeclaims`` counts NodeClaims not being deleted; ``nodeclaims_by_state`` counts every
    NodeClaim by its latest state (``NODECLAIM_STATES``). ``disruptions`` counts, by reason,
    the NodeClaims disrupted since the run began plus those being disrupted (see
    ``sim.scenario.observer``). ``nodes_by_instance_type`` counts the Nodes by their
    ``node.kubernetes.io/instance-type`` label (``-`` without one), for the report's stacked plot;
    ``nodes_by_nodepool`` by their ``karpenter.sh/nodepool`` label (what ``kubectl get nodes -l``
    shows a user per NodePool).
    """

    at: float
    pods_pending: int
    pods_bound: int
    nodes: int
    nodeclaims: int
    cost_per_hour: float
    nodeclaims_by_state: dict[str, int] = field(default_factory=dict)
    disruptions: dict[str, int] = field(default_factory=dict)
    nodes_by_instance_type: dict[str, int] = field(default_factory=dict)
    nodes_by_nodepool: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CapacityRow:
    """NodeClaims of one instance type, capacity type and price at the end of a run."""

    instance_type: str
    capacity_type: str
    count: int
    price_per_hour: float

    @property
    def cost_per_hour(self) -> float:
        return round(self.count * self.price_per_hour, 6)


@dataclass
class ScenarioResult:
    scenario: str
    pods_total: int
    pods_bound: int
    pods_pending: int
    nodes: int
    nodeclaims: int
    cost_per_hour: float
    cost_per_hour_peak: float
    pod_bound_seconds: dict[str, float]
    virtual_seconds: float
    wall_seconds: float
    errors: list[str] = field(default_factory=list)
    conflicts: int = 0
    samples: list[Sample] = field(default_factory=list)
    disruptions: dict[str, int] = field(default_factory=dict)
    api_requests: dict[str, int] = field(default_factory=dict)
    watch_polls: int = 0
    capacity: list[CapacityRow] = field(default_factory=list)
    beyond_plan: BeyondPlan = field(default_factory=BeyondPlan)

    def _beyond_plan_json(self) -> dict[str, Any]:
        """Launches beyond the plan (``sim.scenario.plans``), as top-level fields."""
        return {
            "nodeclaims_beyond_plan": self.beyond_plan.nodeclaims_beyond_plan,
            "pods_stranded": self.beyond_plan.pods_stranded,
        }

    launch_rounds: dict[str, Any] = field(default_factory=dict)
    """``sim.scenario.launches.LaunchRounds.figures``: replica writes per resource and round,
    and when the last NodeClaim of a round got its provider ID."""

    repacking: dict[str, Any] = field(default_factory=dict)
    """``sim.scenario.repacking.RepackingRounds.figures``: what the re-packing stage decided
    over the run's rounds; empty when it never ran."""

    controller_writes: dict[str, Any] = field(default_factory=dict)
    """``sim.scenario.writes.controller_writes``: the controller's Kubernetes writes, per
    launched node, and the MachinePools it created."""
    native_launch: dict[str, Any] = field(default_factory=dict)
    """``sim.scenario.aws.SimAws.figures`` for a scenario on the emulated AWS: fleet calls and
    the controller's Kubernetes writes per launched node; empty otherwise."""
    spot_interruption: dict[str, Any] = field(default_factory=dict)
    """``sim.scenario.interruptions.Interruptions.figures`` when the timeline interrupts Nodes:
    the replacement's readiness against the deadline, and the pods left with no place to go."""
    violations: list[str] | None = None
    """``sim.invariants`` violations at the end of the run (``simulate --check``); ``None`` when
    not checked."""

    def to_json(self) -> dict[str, Any]:
        """The result with the field names ``simulate --json`` documents (snake_case)."""
        return {
            "scenario": self.scenario,
            "pods_total": self.pods_total,
            "pods_bound": self.pods_bound,
            "pods_pending": self.pods_pending,
            "nodes": self.nodes,
            "nodeclaims": self.nodeclaims,
            "cost_per_hour": self.cost_per_hour,
            "cost_per_hour_peak": self.cost_per_hour_peak,
            "pod_bound_seconds": dict(self.pod_bound_seconds),
            "disruptions": dict(self.disruptions),
            "api_requests": dict(self.api_requests),
            "watch_polls": self.watch_polls,
            "capacity": [
                {**asdict(row), "cost_per_hour": row.cost_per_hour} for row in self.capacity
            ],
            "virtual_seconds": self.virtual_seconds,
            "wall_seconds": round(self.wall_seconds, 3),
            "errors": list(self.errors),
            "conflicts": self.conflicts,
            "samples": [asdict(sample) for sample in self.samples],
            **self._beyond_plan_json(),
            "launch_rounds": dict(self.launch_rounds),
            "repacking": dict(self.repacking),
            "controller_writes": dict(self.controller_writes),
            **({"native_launch": dict(self.native_launch)} if self.native_launch else {}),
            **(
                {"spot_interruption": dict(self.spot_interruption)}
                if self.spot_interruption
                else {}
            ),
            **({} if self.violations is None else {"violations": list(self.violations)}),
        }

    def summary(self) -> str:
        """The readable tables ``simulate SCENARIO`` prints without ``--json``."""
        from karpenter_capi.sim.scenario.summary import render_summary

        return render_summary(self)

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True)
