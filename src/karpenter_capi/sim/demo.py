"""The embedded demo: a scenario in an in-memory cluster, what the controller decided and did.

``karpenter-capi simulate --demo`` (``make run`` runs the ``scale-from-zero`` scenario instead,
through ``sim.scenario``) shows the product working step by step with no cluster: the scenario's
Cluster API objects, NodeClass, NodePool and pods go into an ``InMemoryAPIServer``, the pods are
marked unschedulable as kube-scheduler marks pods no node can hold, and the real provisioning round
(real plugins loaded through their entry points, real NodeClaims written through the API) runs
twice: the first launches, the second proves that pods already covered by launching NodeClaims are
not provisioned twice. Then every controller runs for a few minutes of virtual time next to the
emulated Cluster API (``sim.capi``): the plugin scales MachineDeployments, binds the new Machines,
and the NodeClaims launch, register and initialize as their Nodes join; the scheduler stand-in
binds the pods to them and the kubelet stand-in runs them."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from karpenter_capi.core.clock import FakeClock, format_timestamp
from karpenter_capi.core.kube.resources import (
    MACHINE_DEPLOYMENTS,
    MACHINE_POOLS,
    MACHINE_SETS,
    NODECLAIMS,
    NODES,
    PODS,
)
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.provisioning.loop import (
    Provisioner,
    ProvisioningReport,
    print_report,
)
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.version import SIMULATED_CONTROL_PLANE
from karpenter_capi.sim.capi import add_capi_emulation
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.manifests import load_manifest_files
from karpenter_capi.sim.scenario.schema import SHIPPED
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads import add_workload_emulation

DEMO_SCENARIO = SHIPPED / "demo.yaml"
DEFAULT_MINUTES = 3.0


@dataclass(frozen=True)
class ClaimOutcome:
    """Where one NodeClaim got to by the end of the run."""

    name: str
    launched: bool
    registered: bool
    initialized: bool
    node: str | None
    provider_id: str | None


@dataclass
class ScenarioReport:
    scenario: list[str]
    passes: list[ProvisioningReport]
    nodeclaims: list[dict[str, Any]]
    minutes: float = 0.0
    replicas: dict[str, tuple[int, int]] = field(default_factory=dict)
    outcomes: list[ClaimOutcome] = field(default_factory=list)
    pods: dict[str, str] = field(default_factory=dict)

    def print_lifecycle(self, out: TextIO) -> None:
        out.write(f"\n== the cluster runs for {self.minutes:g} minutes of virtual time ==\n")
        for name, (before, after) in sorted(self.replicas.items()):
            if before != after:
                out.write(f"{name}: {before} -> {after} replicas\n")
        for outcome in self.outcomes:
            stages = [
                stage
                for stage, done in (
                    ("launched", outcome.launched),
                    ("registered", outcome.registered),
                    ("initialized", outcome.initialized),
                )
                if done
            ]
            where = f" as node {outcome.node}" if outcome.node else ""
            out.write(
                f"NodeClaim {outcome.name}: {', '.join(stages) or 'still launching'}{where}"
                f" ({outcome.provider_id or 'no provider ID yet'})\n"
            )
        ready = sum(1 for o in self.outcomes if o.initialized)
        out.write(f"{ready} of {len(self.outcomes)} NodeClaims have an initialized node\n")
        running = sum(1 for where in self.pods.values() if where.startswith("Running"))
        out.write(f"{running} of {len(self.pods)} pods running\n")
        for pod, where in sorted(self.pods.items()):
            if not where.startswith("Running"):
                out.write(f"  {pod}: {where}\n")

    def print(self, out: TextIO) -> None:
        out.write(f"scenario: {', '.join(self.scenario)}\n")
        for number, report in enumerate(self.passes, start=1):
            out.write(f"\n== provisioning pass {number} ==\n")
            print_report(report, out)
        out.write(f"\n{len(self.nodeclaims)} NodeClaims in the cluster:\n")
        for claim in self.nodeclaims:
            requirement: Mapping[str, Any] = next(
                (
                    r
                    for r in claim["spec"]["requirements"]
                    if r["key"] == "node.kubernetes.io/instance-type"
                ),
                {"values": []},
            )
            out.write(
                f"  {claim['metadata']['name']}: instance types "
                f"{', '.join(requirement['values'])}\n"
            )
        if self.minutes > 0:
            self.print_lifecycle(out)

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "passes": [
                {
                    "pending": r.pending,
                    "inFlightPods": r.in_flight_pods,
                    "launched": [
                        {
                            "nodeClaim": d.nodeclaim,
                            "nodePool": d.nodepool,
                            "instanceType": d.instance_type,
                            "zone": d.zone,
                            "capacityType": d.capacity_type,
                            "price": d.price,
                            "pods": list(d.pods),
                            "requests": dict(d.requests),
                            "alternatives": list(d.alternatives),
                        }
                        for d in r.launched
                    ],
                    "unschedulable": r.unschedulable,
                    "nodePoolErrors": r.nodepool_errors,
                    "hourlyCost": round(r.hourly_cost, 6),
                }
                for r in self.passes
            ],
            "nodeClaims": [c["metadata"]["name"] for c in self.nodeclaims],
            "lifecycle": {
                "minutes": self.minutes,
                "replicas": {k: {"before": b, "after": a} for k, (b, a) in self.replicas.items()},
                "nodeClaims": [
                    {
                        "name": o.name,
                        "launched": o.launched,
                        "registered": o.registered,
                        "initialized": o.initialized,
                        "node": o.node,
                        "providerID": o.provider_id,
                    }
                    for o in self.outcomes
                ],
                "pods": self.pods,
            },
        }


def mark_unschedulable(server: InMemoryAPIServer) -> int:
    """Set ``PodScheduled=False/Unschedulable`` on unbound pods, as kube-scheduler does."""
    node_count = len(server.list(NODES).items)
    marked = 0
    for pod in server.list(PODS).items:
        if (pod.get("spec") or {}).get("nodeName"):
            continue
        meta = pod["metadata"]
        server.patch(
            PODS,
            meta["name"],
            {
                "status": {
                    "phase": "Pending",
                    "conditions": [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": f"0/{node_count} nodes are available",
                            "lastTransitionTime": format_timestamp(server.clock.now()),
                        }
                    ],
                }
            },
            meta["namespace"],
            subresource="status",
        )
        marked += 1
    return marked


def _replicas(server: InMemoryAPIServer) -> dict[str, int]:
    return {
        f"{kind.kind} {obj['metadata']['namespace']}/{obj['metadata']['name']}": int(
            (obj.get("spec") or {}).get("replicas") or 0
        )
        for kind in (MACHINE_DEPLOYMENTS, MACHINE_SETS, MACHINE_POOLS)
        for obj in server.list(kind).items
        if not (obj["metadata"].get("ownerReferences") or [])
    }


def _pod_phases(server: InMemoryAPIServer) -> dict[str, str]:
    """Each pod and where it is: ``Running on <node>``, or ``Pending``."""
    phases = {}
    for pod in server.list(PODS).items:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        phases[key] = f"{phase} on {node}" if node else phase
    return phases


def _outcome(claim: Mapping[str, Any]) -> ClaimOutcome:
    status = claim.get("status") or {}
    true = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    return ClaimOutcome(
        name=str(claim["metadata"]["name"]),
        launched="Launched" in true,
        registered="Registered" in true,
        initialized="Initialized" in true,
        node=status.get("nodeName"),
        provider_id=status.get("providerID"),
    )


def run_scenario(
    paths: Sequence[Path],
    plugin_names: Sequence[str],
    passes: int = 2,
    minutes: float = DEFAULT_MINUTES,
) -> ScenarioReport:
    """Load ``paths``, run ``passes`` provisioning rounds, then every controller for ``minutes``."""
    clock = FakeClock()
    server = new_cluster(clock=clock)
    server.version_info = dict(SIMULATED_CONTROL_PLANE)  # the stand-in is v1.35's
    server.apply_manifests(load_manifest_files(paths))
    mark_unschedulable(server)
    environment = PluginEnvironment(
        workload=server,
        management=server,
        clock=clock,
        logger=logging.getLogger("karpenter_capi.plugins"),
    )
    plugins = Plugins.load(plugin_names, environment)
    provisioner = Provisioner(server, plugins, clock)
    reports = [provisioner.reconcile() for _ in range(passes)]
    nodeclaims = server.list(NODECLAIMS).items
    before = _replicas(server)
    if minutes > 0:
        operator = Operator(
            server,
            server,
            plugins,
            clock,
            OperatorOptions(leader_elect=False, metrics_port=None),
        )
        add_capi_emulation(operator.manager, nodes=True)
        add_workload_emulation(operator.manager)
        operator.manager.add(SimScheduler(server, operator.manager, clock))
        operator.stepped().advance(minutes * 60)
    after = _replicas(server)
    return ScenarioReport(
        scenario=[str(p) for p in paths],
        passes=reports,
        nodeclaims=nodeclaims,
        minutes=minutes,
        replicas={key: (before.get(key, 0), after.get(key, 0)) for key in sorted(after)},
        outcomes=[_outcome(c) for c in server.list(NODECLAIMS).items],
        pods=_pod_phases(server),
    )
