"""One provisioning pass, and the loop that repeats it: pending pods to NodeClaims.

A pass reads the provisionable pods, resolves every NodePool's inventory (highest weight
first), packs the pods that the NodePool accepts onto NodeClaims still in flight and then onto
new nodes, and creates one NodeClaim per new node. It is stateless between passes: in-flight
NodeClaims (created, not yet a Node) are counted again each time, so a pass that runs while
earlier claims launch does not ask twice for the same pods.

The controller runtime (work queues, informers, leader election) replaces the polling loop in
the runtime issue; the pass itself stays.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.resources import NODECLAIMS, NODEPOOLS, PODS
from karpenter_capi.core.plugins import Plugins
from karpenter_capi.core.provisioning.greedy import (
    GreedyPacker,
    PlannedNode,
    PoolTemplate,
)
from karpenter_capi.core.provisioning.inventory import NodePoolInventory, resolve_inventory
from karpenter_capi.core.provisioning.pending import is_provisionable, pod_key
from karpenter_capi.core.scheduling.taints import Taint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaunchDecision:
    nodeclaim: str
    nodepool: str
    instance_type: str
    zone: str
    capacity_type: str
    price: float
    pods: tuple[str, ...]
    requests: Mapping[str, str]
    alternatives: tuple[str, ...]


@dataclass
class ProvisioningReport:
    launched: list[LaunchDecision] = field(default_factory=list)
    unschedulable: dict[str, str] = field(default_factory=dict)  # pod key -> why
    nodepool_errors: dict[str, str] = field(default_factory=dict)
    pending: int = 0
    in_flight_pods: int = 0

    @property
    def hourly_cost(self) -> float:
        return sum(decision.price for decision in self.launched)


def pool_template(raw: Mapping[str, Any]) -> PoolTemplate:
    template = (raw.get("spec") or {}).get("template") or {}
    spec = template.get("spec") or {}
    return PoolTemplate(
        name=str(raw["metadata"]["name"]),
        labels=dict((template.get("metadata") or {}).get("labels") or {}),
        taints=tuple(Taint.from_dict(t) for t in spec.get("taints") or []),
        requirements=tuple(spec.get("requirements") or []),
    )


def nodeclaim_body(raw_pool: Mapping[str, Any], node: PlannedNode) -> JsonObject:
    """The NodeClaim Karpenter would create for a planned node of this NodePool."""
    meta = raw_pool["metadata"]
    template = (raw_pool.get("spec") or {}).get("template") or {}
    spec = template.get("spec") or {}
    name = str(meta["name"])
    requirements = [
        r
        for r in spec.get("requirements") or []
        if r.get("key") not in (wellknown.LABEL_INSTANCE_TYPE, wellknown.LABEL_NODEPOOL)
    ]
    requirements.append(
        {
            "key": wellknown.LABEL_INSTANCE_TYPE,
            "operator": "In",
            "values": [it.name for it in node.alternatives] or [node.instance_type.name],
        }
    )
    requirements.append({"key": wellknown.LABEL_NODEPOOL, "operator": "In", "values": [name]})
    body: JsonObject = {
        "apiVersion": NODECLAIMS.api_version,
        "kind": NODECLAIMS.kind,
        "metadata": {
            "generateName": f"{name}-",
            "labels": {
                **((template.get("metadata") or {}).get("labels") or {}),
                wellknown.LABEL_NODEPOOL: name,
            },
            "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
            "ownerReferences": [
                {
                    "apiVersion": NODEPOOLS.api_version,
                    "kind": NODEPOOLS.kind,
                    "name": name,
                    "uid": meta.get("uid", ""),
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "requirements": requirements,
            "resources": {"requests": node.requests.to_dict()},
            "nodeClassRef": spec.get("nodeClassRef"),
        },
    }
    for key in ("taints", "startupTaints", "expireAfter", "terminationGracePeriod"):
        if spec.get(key) is not None:
            body["spec"][key] = spec[key]
    return body


def _in_flight(
    claims: Sequence[Mapping[str, Any]],
    inventory: NodePoolInventory,
    nominations: Mapping[str, frozenset[str]],
) -> list[PlannedNode]:
    """NodeClaims of this NodePool that have no Node yet, as nodes pods can still go to.

    Ordered by name so a pass does not depend on list order; each carries the pods this
    controller nominated to it, so those pods find their place before others can take it.
    """
    by_name = {it.name: it for it in inventory.instance_types}
    nodes = []
    for claim in sorted(claims, key=lambda c: str((c.get("metadata") or {}).get("name", ""))):
        meta, status = claim.get("metadata") or {}, claim.get("status") or {}
        if status.get("nodeName") or meta.get("deletionTimestamp"):
            continue
        if (meta.get("labels") or {}).get(wellknown.LABEL_NODEPOOL) != inventory.nodepool:
            continue
        names = next(
            (
                r.get("values") or []
                for r in (claim.get("spec") or {}).get("requirements") or []
                if r.get("key") == wellknown.LABEL_INSTANCE_TYPE and r.get("operator") == "In"
            ),
            [],
        )
        candidates = [by_name[n] for n in names if n in by_name]
        if not candidates:
            continue
        # Until launch says which type it got, assume the smallest the claim allows.
        smallest = min(candidates, key=lambda it: (it.allocatable.milli("cpu"), it.name))
        offering = smallest.cheapest_offering() or (
            smallest.offerings[0] if smallest.offerings else None
        )
        if offering is None:
            continue
        name = str(meta.get("name", ""))
        nodes.append(
            PlannedNode(
                smallest, offering, claim_name=name, nominated=nominations.get(name, frozenset())
            )
        )
    return nodes


class Provisioner:
    """Runs provisioning passes against one cluster through the enabled plugins."""

    def __init__(self, client: KubeClient, plugins: Plugins, clock: Clock) -> None:
        self._client = client
        self._plugins = plugins
        self._clock = clock
        # Like Karpenter's cluster state: the pods each NodeClaim was launched (or later
        # counted) for, kept in memory; a restart loses them and packing starts afresh.
        self._nominations: dict[str, frozenset[str]] = {}

    def reconcile(self) -> ProvisioningReport:
        report = ProvisioningReport()
        remaining: list[Mapping[str, Any]] = [
            p for p in self._client.list(PODS).items if is_provisionable(p)
        ]
        report.pending = len(remaining)
        if not remaining:
            return report
        claims = self._client.list(NODECLAIMS).items
        last_reason: dict[str, str] = {}
        for inventory in resolve_inventory(self._client, self._plugins):
            if inventory.error:
                report.nodepool_errors[inventory.nodepool] = inventory.error
                continue
            if not remaining:
                break
            packer = GreedyPacker(pool_template(inventory.raw), inventory.instance_types)
            existing = _in_flight(claims, inventory, self._nominations)
            result = packer.pack(remaining, existing=existing)
            for node in result.nodes:
                if node.claim_name:
                    report.in_flight_pods += len(node.pods)
                    self._nominations[node.claim_name] = frozenset(map(pod_key, node.pods))
                    continue
                decision = self._launch(inventory.raw, node)
                self._nominations[decision.nodeclaim] = frozenset(decision.pods)
                report.launched.append(decision)
            for unplaced in result.unplaced:
                last_reason[pod_key(unplaced.pod)] = (
                    f"NodePool {inventory.nodepool}: {unplaced.reason}"
                )
            remaining = [u.pod for u in result.unplaced]
        for pod in remaining:
            key = pod_key(pod)
            report.unschedulable[key] = last_reason.get(key, "no NodePool can provision it")
        return report

    def _launch(self, raw_pool: Mapping[str, Any], node: PlannedNode) -> LaunchDecision:
        created = self._client.create(NODECLAIMS, nodeclaim_body(raw_pool, node))
        name = str(created["metadata"]["name"])
        log.info(
            "created NodeClaim %s (%s) for %d pods", name, node.instance_type.name, len(node.pods)
        )
        return LaunchDecision(
            nodeclaim=name,
            nodepool=str(raw_pool["metadata"]["name"]),
            instance_type=node.instance_type.name,
            zone=node.offering.zone,
            capacity_type=node.offering.capacity_type,
            price=node.offering.price,
            pods=tuple(sorted(pod_key(p) for p in node.pods)),
            requests=node.requests.to_dict(),
            alternatives=tuple(it.name for it in node.alternatives),
        )


def print_report(report: ProvisioningReport, out: TextIO) -> None:
    out.write(
        f"{report.pending} provisionable pods; "
        f"{report.in_flight_pods} fit on NodeClaims already launching\n"
    )
    for pool, error in sorted(report.nodepool_errors.items()):
        out.write(f"NodePool {pool}: {error}\n")
    for decision in report.launched:
        alternatives = len(decision.alternatives)
        out.write(
            f"NodeClaim {decision.nodeclaim}: {decision.instance_type} {decision.capacity_type} "
            f"in {decision.zone or '-'} at ${decision.price:.4f}/h for {len(decision.pods)} pods "
            f"(requests {_format_requests(decision.requests)}; "
            f"{alternatives} compatible instance type{'s' if alternatives != 1 else ''})\n"
        )
        out.write(f"    pods: {', '.join(decision.pods)}\n")
    for pod, reason in sorted(report.unschedulable.items()):
        out.write(f"cannot provision {pod}: {reason}\n")
    out.write(f"{len(report.launched)} NodeClaims, ${report.hourly_cost:.4f}/h in all\n")


def _format_requests(requests: Mapping[str, str]) -> str:
    return ", ".join(f"{name}={value}" for name, value in sorted(requests.items()))


def run_provisioning(
    client: KubeClient,
    plugins: Plugins,
    *,
    clock: Clock,
    interval: float,
    once: bool,
    out: TextIO,
    stop: threading.Event | None = None,
) -> int:
    """Repeat provisioning passes every ``interval`` seconds until ``stop`` (or once)."""
    provisioner = Provisioner(client, plugins, clock)
    stop = stop or threading.Event()
    while True:
        report = provisioner.reconcile()
        if report.launched or report.unschedulable or report.nodepool_errors or once:
            print_report(report, out)
            out.flush()
        if once or stop.wait(interval):
            return 0
