"""``karpenter-capi explain``: what the controller would do next on a live cluster, and why.

A user looking at a pending pod or at a node that is never consolidated wants the controller's
own reasoning, not a guess. This command reads the cluster once and runs the same code the
controller runs: one provisioning round in dry-run mode (``Provisioner(dry_run=True)``: it
creates no NodeClaim and records no Event) and one disruption pass (``planner.plan``, which is
pure), with the plugins loaded read-only. So it writes nothing, and its reasons are the ones
the controller would act on: each pending pod's NodeClaim, node, or the per-NodePool refusals;
each NodeClaim's verdict from the pass (``core.disruption.verdicts``), and what the
round's re-packing made of greedy's plan (``core.scheduling.packing_summary``).

What only a running controller knows is not seen: a command it is validating or carrying out,
and the replacements it protects for a while afterwards.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from karpenter_capi.cli.clusters import clients, fleet_member_clients, load_plugins
from karpenter_capi.cli.options import parse_feature_gates
from karpenter_capi.core.clock import Clock

if TYPE_CHECKING:
    from karpenter_capi.core.kube.client import KubeClient
    from karpenter_capi.core.plugin_host import Plugins
    from karpenter_capi.core.scheduling.packing_summary import PackingSummary


def add_explain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--feature-gates",
        default="",
        help="as for run, e.g. SpotToSpotConsolidation=true or "
        "NominatedNodeNameForExpectation=false, so the round and the pass decide as the "
        "controller would",
    )
    parser.add_argument(
        "--cluster",
        metavar="NAMESPACE/NAME",
        help="fleet mode: --kubeconfig is the management cluster; explain within the workload "
        "cluster of this Cluster API Cluster (NAME alone when one namespace has it), reached "
        "through its <cluster>-kubeconfig Secret",
    )


@dataclass
class PodExplanation:
    pod: str
    decision: str
    """``new-nodeclaim``, ``existing-node``, ``launching-nodeclaim`` or ``cannot-help``."""
    target: str = ""
    nodepool: str = ""
    instance_types: list[str] = field(default_factory=list)
    instance_type: str = ""
    price: float | None = None
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"pod": self.pod, "decision": self.decision}
        if self.target:
            doc["target"] = self.target
        if self.nodepool:
            doc["nodepool"] = self.nodepool
        if self.instance_types:
            doc["instanceType"] = self.instance_type
            doc["instanceTypes"] = self.instance_types
            doc["price"] = self.price
        if self.reason:
            doc["reason"] = self.reason
        return doc

    def text(self) -> str:
        if self.decision == "new-nodeclaim":
            types = ", ".join(self.instance_types[:5])
            more = len(self.instance_types) - 5
            types += f" and {more} other(s)" if more > 0 else ""
            return (
                f"a new NodeClaim of NodePool {self.nodepool}: {self.instance_type} at "
                f"${self.price or 0:.4f}/h ({types})"
            )
        if self.decision == "existing-node":
            return f"existing node {self.target}"
        if self.decision == "launching-nodeclaim":
            return f"NodeClaim {self.target}, still launching"
        return f"cannot be helped: {self.reason}"


@dataclass
class StaticExplanation:
    """A static NodePool: where it stands against ``replicas`` and what comes next."""

    nodepool: str
    replicas: int
    active: int
    pending_disruption: int
    deleting: int
    create: int
    delete: list[str]
    """The NodeClaims scale-down would delete now, in the order it would choose them."""
    summary: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodepool": self.nodepool,
            "replicas": self.replicas,
            "active": self.active,
            "pendingDisruption": self.pending_disruption,
            "deleting": self.deleting,
            "create": self.create,
            "delete": self.delete,
            "summary": self.summary,
        }

    def text(self) -> str:
        line = f"NodePool {self.nodepool}: {self.summary}"
        return f"{line} ({', '.join(self.delete)})" if self.delete else line


@dataclass
class Explanation:
    pods: list[PodExplanation]
    nodepool_errors: dict[str, str]
    command: str | None
    nodes: list[Any]
    """``NodeVerdict``s, one per NodeClaim."""
    static: list[StaticExplanation] = field(default_factory=list)
    nodepool_warnings: dict[str, list[str]] = field(default_factory=dict)
    """What the NodePool readiness controller says on a usable pool: no instance type meets
    its requirements, an ``expireAfter`` too short to keep a node."""
    unclaimed_nodes: dict[str, str] = field(default_factory=dict)
    """Nodes with Karpenter's labels that no NodeClaim holds, with their Event's words."""
    invalid_nodeclaims: dict[str, str] = field(default_factory=dict)
    """NodeClaims the model refuses, with their ``Ready`` condition's words."""
    packing: PackingSummary | None = None
    """What the round's re-packing stage made of greedy's plan, when it ran."""
    nodeclass_problems: dict[str, list[str]] = field(default_factory=dict)
    """ClusterAPINodeClass name to what its Ready condition says is wrong (resources left
    out, or why it is not ready), computed afresh."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "provisioning": {
                "pods": [p.as_dict() for p in self.pods],
                "nodepoolErrors": self.nodepool_errors,
                "nodepoolWarnings": self.nodepool_warnings,
                "nodeclassProblems": self.nodeclass_problems,
                "packing": self.packing.as_dict() if self.packing else None,
            },
            "static": [s.as_dict() for s in self.static],
            "disruption": {
                "command": self.command,
                "nodes": [v.as_dict() for v in self.nodes],
            },
            "unclaimedNodes": self.unclaimed_nodes,
            "invalidNodeClaims": self.invalid_nodeclaims,
        }

    def write_text(self, out: TextIO) -> None:
        self._write_provisioning(out)
        out.write("\nNext disruption pass: ")
        out.write(f"{self.command}\n" if self.command else "nothing to disrupt\n")
        for verdict in self.nodes:
            node = f" (node {verdict.node})" if verdict.node else ""
            out.write(
                f"  NodeClaim {verdict.nodeclaim}{node}, NodePool {verdict.nodepool or '-'}: "
                f"{verdict.verdict}: {verdict.reason}\n"
            )
        self._write_leftovers(out)

    def _write_provisioning(self, out: TextIO) -> None:
        """The provisioning round: what keeps pools and classes from use, each pod's
        placement, and the static pools."""
        out.write(f"Next provisioning round: {len(self.pods)} pending pod(s)\n")
        for pool, error in sorted(self.nodepool_errors.items()):
            out.write(f"  NodePool {pool} is not usable: {error}\n")
        for pool, warnings in sorted(self.nodepool_warnings.items()):
            for warning in warnings:
                out.write(f"  NodePool {pool}: {warning}\n")
        for nodeclass, problems in sorted(self.nodeclass_problems.items()):
            for problem in problems:
                out.write(f"  ClusterAPINodeClass {nodeclass}: {problem}\n")
        if self.packing is not None:
            out.write(f"  Re-packing: {self.packing.reason}\n")
        for pod in self.pods:
            out.write(f"  {pod.pod}: {pod.text()}\n")
        if self.static:
            out.write("\nStatic NodePools (spec.replicas):\n")
            for static in self.static:
                out.write(f"  {static.text()}\n")

    def _write_leftovers(self, out: TextIO) -> None:
        """Objects neither pass acts on: Nodes without a NodeClaim, NodeClaims it cannot read."""
        if self.unclaimed_nodes:
            out.write("\nNodes no NodeClaim holds:\n")
            for node, message in sorted(self.unclaimed_nodes.items()):
                out.write(f"  Node {node}: {message}\n")
        if self.invalid_nodeclaims:
            out.write("\nNodeClaims the controller cannot work on:\n")
            for claim, message in sorted(self.invalid_nodeclaims.items()):
                out.write(f"  NodeClaim {claim}: {message}\n")


def explain(
    workload: KubeClient,
    plugins: Plugins,
    clock: Clock,
    *,
    spot_to_spot: bool = False,
    plans_nominated: bool = False,
) -> Explanation:
    """Read the cluster once; run one dry-run provisioning round and one disruption pass
    (``plans_nominated``: plan as a controller that nominates planned pods does)."""
    from karpenter_capi.core.disruption.controller import DEFAULT_NOMINATION_WINDOW
    from karpenter_capi.core.disruption.planner import PassSettings, plan
    from karpenter_capi.core.disruption.refusals import ask_providers
    from karpenter_capi.core.disruption.verdicts import node_verdicts
    from karpenter_capi.core.kube.resources import POD_DISRUPTION_BUDGETS
    from karpenter_capi.core.provisioning.inventory import resolve_inventory
    from karpenter_capi.core.provisioning.provisioner import Provisioner
    from karpenter_capi.core.provisioning.state import ClusterSnapshot

    snapshot = ClusterSnapshot.read(workload)
    provisioner = Provisioner(
        workload, plugins, clock, dry_run=True, plans_nominated=plans_nominated
    )
    round_report = provisioner.reconcile(snapshot)
    claims = {str(c["metadata"]["name"]) for c in snapshot.nodeclaims}
    pods: dict[str, PodExplanation] = {}
    for decision in round_report.launched:
        for key in decision.pods:
            pods[key] = PodExplanation(
                key,
                "new-nodeclaim",
                nodepool=decision.nodepool,
                instance_type=decision.instance_type,
                instance_types=list(decision.alternatives),
                price=decision.price,
            )
    for key, target in round_report.placed.items():
        kind = "launching-nodeclaim" if target in claims else "existing-node"
        pods[key] = PodExplanation(key, kind, target=target)
    for key, reason in round_report.unschedulable.items():
        pods[key] = PodExplanation(key, "cannot-help", reason=reason)

    inventories = resolve_inventory(workload, plugins)
    usable = [i for i in inventories if i.model is not None and not i.error]

    def blocked(nodeclaims: list[Mapping[str, Any]]) -> Mapping[str, str]:
        return ask_providers(plugins, nodeclaims)

    report = plan(
        snapshot,
        inventories,
        workload.list(POD_DISRUPTION_BUDGETS).items,
        now=clock.now(),
        clock=clock,
        protected=provisioner.nominated_within(DEFAULT_NOMINATION_WINDOW),
        blocked=blocked,
        nominations=provisioner.nominations(),
        settings=PassSettings(spot_to_spot=spot_to_spot),
    )
    pools = {i.nodepool: i.model for i in usable if i.model is not None}
    return Explanation(
        nodepool_warnings=_nodepool_warnings(usable),
        nodeclass_problems=_nodeclass_problems(workload, plugins),
        unclaimed_nodes=_unclaimed_nodes(snapshot),
        invalid_nodeclaims=_invalid_nodeclaims(snapshot),
        pods=[pods[k] for k in sorted(pods)],
        nodepool_errors=dict(round_report.nodepool_errors),
        packing=round_report.packing,
        command=report.command.describe() if report.command else None,
        nodes=node_verdicts(report, snapshot, pools, clock.now()),
        static=explain_static(
            [i.model for i in inventories if i.model is not None], snapshot, clock
        ),
    )


def _nodepool_warnings(inventories: list[Any]) -> dict[str, list[str]]:
    """The readiness controller's words on each usable NodePool, computed afresh."""
    from karpenter_capi.core.lifecycle.nodepool import (
        instance_types_problem,
        limits_warnings,
        short_expiry_warning,
    )

    found: dict[str, list[str]] = {}
    for inventory in inventories:
        warnings = [
            instance_types_problem(inventory.raw, inventory.instance_types),
            short_expiry_warning(inventory.model),
            *(
                message
                for _, _, message in limits_warnings(
                    inventory.raw, inventory.model, inventory.instance_types
                )
            ),
        ]
        if any(warnings):
            found[inventory.nodepool] = [w for w in warnings if w]
    return found


def _nodeclass_problems(workload: KubeClient, plugins: Plugins) -> dict[str, list[str]]:
    """What ``generic_capi`` would write on each ClusterAPINodeClass's Ready condition, when
    something is wrong: a resource left out (a topology-managed ``replicas``, a paused or
    shapeless MachineDeployment) does not stop the NodePool, so only the NodeClass says it."""
    from karpenter_capi.core.kube.errors import NotFound
    from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES
    from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin

    if "generic_capi" not in plugins.names:
        return {}
    plugin = plugins.plugin("generic_capi")
    if not isinstance(plugin, GenericCapiPlugin):
        return {}
    try:
        nodeclasses = workload.list(CLUSTER_API_NODE_CLASSES).items
    except NotFound:
        return {}
    found: dict[str, list[str]] = {}
    for nodeclass in nodeclasses:
        problems = plugin.explain_nodeclass(nodeclass)
        if problems:
            found[str(nodeclass["metadata"]["name"])] = problems
    return found


def _unclaimed_nodes(snapshot: Any) -> dict[str, str]:
    from karpenter_capi.core.lifecycle.unclaimed import holds, unclaimed_message

    found = {}
    for node in snapshot.nodes:
        message = unclaimed_message(node)
        if message and not any(holds(claim, node) for claim in snapshot.nodeclaims):
            found[str(node["metadata"]["name"])] = message
    return found


def _invalid_nodeclaims(snapshot: Any) -> dict[str, str]:
    from karpenter_capi.core.lifecycle.controller import invalid_nodeclaim_message

    found = {}
    for claim in snapshot.nodeclaims:
        message = invalid_nodeclaim_message(claim)
        if message:
            found[str(claim["metadata"]["name"])] = message
    return found


def explain_static(pools: list[Any], snapshot: Any, clock: Clock) -> list[StaticExplanation]:
    """What the static controllers would do next for each static NodePool of ``pools``."""
    from karpenter_capi.core.kube.indexes import pods_by_node_name
    from karpenter_capi.core.static.plan import plan_replicas, scale_down_choice

    pods_by_node: dict[str, list[Any]] = {}
    for pod in snapshot.pods:
        for node in pods_by_node_name(pod):
            pods_by_node.setdefault(node, []).append(pod)
    result = []
    for pool in sorted((p for p in pools if p.is_static), key=lambda p: p.name):
        plan = plan_replicas(pool, snapshot.nodeclaims, snapshot.nodes)
        chosen = scale_down_choice(
            pool.name,
            plan.delete,
            nodeclaims=snapshot.nodeclaims,
            nodes=snapshot.nodes,
            pods_by_node=pods_by_node,
            now=clock.now(),
        )
        result.append(
            StaticExplanation(
                nodepool=pool.name,
                replicas=plan.replicas,
                active=plan.count.active,
                pending_disruption=plan.count.pending_disruption,
                deleting=plan.count.deleting,
                create=plan.create,
                delete=[c.name for c in chosen],
                summary=plan.describe(),
            )
        )
    return result


def explain_command(args: argparse.Namespace, out: TextIO) -> int:
    """Print the explanation of the cluster ``args`` names; writes nothing to it."""
    from karpenter_capi.core.clock import SystemClock
    from karpenter_capi.core.provisioning.nominations import GATE, nomination_mode

    gates = parse_feature_gates(args.feature_gates)
    if getattr(args, "cluster", None):
        workload, scoped = fleet_member_clients(args, args.cluster)
        plugins = load_plugins(
            args, workload, scoped, read_only=True, cluster=(scoped.namespace, scoped.name)
        )
    else:
        workload, management = clients(args)
        plugins = load_plugins(args, workload, management, read_only=True)
    result = explain(
        workload,
        plugins,
        SystemClock(),
        spot_to_spot=gates.get("SpotToSpotConsolidation", False),
        plans_nominated=nomination_mode(workload, gates.get(GATE)).enabled,
    )
    if args.json:
        out.write(json.dumps(result.as_dict(), indent=2, sort_keys=True) + "\n")
    else:
        result.write_text(out)
    return 0
