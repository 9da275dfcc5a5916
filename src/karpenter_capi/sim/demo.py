"""The embedded demo: a scenario in an in-memory cluster, one controller pass, what it decided.

``make run`` (``karpenter-capi simulate --demo``) shows a newcomer the product working with no
cluster at all: the scenario's Cluster API objects, NodeClass, NodePool and pods go into an
``InMemoryAPIServer``, the pods are marked unschedulable as kube-scheduler marks pods no node can
hold, and the real provisioning pass (real plugins loaded through their entry points, real
NodeClaims written through the API) runs twice: the first pass launches, the second proves that
pods already covered by launching NodeClaims are not provisioned twice.

The full simulator (CAPI Machines, kubelets, a scheduler, virtual time) grows from here in the
simulator issue.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from karpenter_capi.core.clock import FakeClock, format_timestamp
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES, PODS
from karpenter_capi.core.plugins import PluginEnvironment, Plugins
from karpenter_capi.core.provisioning.loop import (
    Provisioner,
    ProvisioningReport,
    print_report,
)
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.manifests import load_manifest_files

DEMO_SCENARIO = Path(__file__).parent / "scenarios" / "demo.yaml"


@dataclass
class ScenarioReport:
    scenario: list[str]
    passes: list[ProvisioningReport]
    nodeclaims: list[dict[str, Any]]

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


def run_scenario(
    paths: Sequence[Path], plugin_names: Sequence[str], passes: int = 2
) -> ScenarioReport:
    clock = FakeClock()
    server = new_cluster(clock=clock)
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
    return ScenarioReport(
        scenario=[str(p) for p in paths],
        passes=reports,
        nodeclaims=server.list(NODECLAIMS).items,
    )
