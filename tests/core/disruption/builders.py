"""A cluster as the disruption planner reads it, built in a few lines per test.

Nodes come with their NodeClaim (initialized, consolidatable unless told otherwise), pods are
bound to them; the NodePool and its instance types are plain data, priced so that which
consolidation is cheaper is obvious from the numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.clock import FakeClock, format_timestamp
from karpenter_capi.core.disruption.planner import PassReport, PassSettings, plan
from karpenter_capi.core.instancetype import InstanceType, Offering, freeze_requirements
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.provisioning.state import ClusterSnapshot
from karpenter_capi.core.values.resources import ResourceList

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
ZONES = ("zone-a", "zone-b")


def instance_type(
    name: str, cpu: int, memory_gib: int, price: float, *, spot: float | None = None
) -> InstanceType:
    offerings = [Offering(zone, wellknown.CAPACITY_TYPE_ON_DEMAND, price) for zone in ZONES]
    if spot is not None:
        offerings += [Offering(zone, wellknown.CAPACITY_TYPE_SPOT, spot) for zone in ZONES]
    return InstanceType(
        name=name,
        capacity=ResourceList.parse({"cpu": str(cpu), "memory": f"{memory_gib}Gi", "pods": "110"}),
        offerings=tuple(offerings),
        requirements=freeze_requirements({wellknown.LABEL_ARCH: ["amd64"]}),
    )


def default_types() -> list[InstanceType]:
    return [
        instance_type("small", 2, 4, 0.10, spot=0.03),
        instance_type("medium", 4, 8, 0.20, spot=0.06),
        instance_type("large", 8, 16, 0.40, spot=0.12),
    ]


def nodeclaim_object(name: str, *, version: str | None = None, **spec: Any) -> dict[str, Any]:
    """A bare NodeClaim as the API serves it, on the default NodeClass; with ``version``, a uid
    and that resourceVersion too (what a cache keyed by object version needs)."""
    metadata: dict[str, Any] = {"name": name}
    if version is not None:
        metadata |= {"uid": f"uid-{name}", "resourceVersion": version}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": metadata,
        "spec": {
            "nodeClassRef": {
                "group": wellknown.NODECLASS_GROUP,
                "kind": wellknown.NODECLASS_KIND,
                "name": "default",
            },
            "requirements": [],
            **spec,
        },
    }


@dataclass
class Cluster:
    """Nodes, NodeClaims, pods and PDBs, plus one NodePool ``default`` and any ``others`` (name
    -> their ``spec.disruption``), all with the same instance types and requirements."""

    types: list[InstanceType] = field(default_factory=default_types)
    disruption: dict[str, Any] = field(
        default_factory=lambda: {
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": "0s",
            "budgets": [{"nodes": "100%"}],
        }
    )
    # On-demand only unless a test says otherwise, so a replacement is never spot by surprise.
    requirements: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {
                "key": wellknown.LABEL_CAPACITY_TYPE,
                "operator": "In",
                "values": [wellknown.CAPACITY_TYPE_ON_DEMAND],
            }
        ]
    )
    others: dict[str, dict[str, Any]] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    nodeclaims: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    pdbs: list[dict[str, Any]] = field(default_factory=list)

    def pool(self, name: str = "default") -> dict[str, Any]:
        return {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": name, "uid": f"uid-{name}"},
            "spec": {
                "template": {
                    "spec": {
                        "nodeClassRef": {
                            "group": wellknown.NODECLASS_GROUP,
                            "kind": wellknown.NODECLASS_KIND,
                            "name": "default",
                        },
                        "requirements": self.requirements,
                    }
                },
                "disruption": self.others.get(name, self.disruption),
            },
        }

    def node(
        self,
        name: str,
        type_name: str,
        *,
        zone: str = "zone-a",
        capacity_type: str = wellknown.CAPACITY_TYPE_ON_DEMAND,
        consolidatable: bool = True,
        drifted: bool = False,
        node_annotations: Mapping[str, str] | None = None,
        age: timedelta = timedelta(hours=1),
        tainted: bool = False,
        nodepool: str = "default",
    ) -> str:
        it = next(t for t in self.types if t.name == type_name)
        created = format_timestamp(NOW - age)
        labels = {
            wellknown.LABEL_INSTANCE_TYPE: type_name,
            wellknown.LABEL_TOPOLOGY_ZONE: zone,
            wellknown.LABEL_CAPACITY_TYPE: capacity_type,
            wellknown.LABEL_NODEPOOL: nodepool,
            wellknown.LABEL_HOSTNAME: name,
            wellknown.LABEL_INITIALIZED: "true",
            wellknown.LABEL_ARCH: "amd64",
        }
        spec: dict[str, Any] = {"providerID": f"fake://{name}"}
        if tainted:
            spec["taints"] = [{"key": wellknown.TAINT_DISRUPTED_KEY, "effect": "NoSchedule"}]
        self.nodes.append(
            {
                "metadata": {
                    "name": name,
                    "labels": labels,
                    "annotations": dict(node_annotations or {}),
                    "creationTimestamp": created,
                },
                "spec": spec,
                "status": {
                    "allocatable": it.allocatable.to_dict(),
                    "capacity": it.capacity.to_dict(),
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
        conditions = [{"type": "Initialized", "status": "True"}]
        if consolidatable:
            conditions.append({"type": "Consolidatable", "status": "True"})
        if drifted:
            conditions.append({"type": "Drifted", "status": "True", "reason": "NodePoolDrifted"})
        self.nodeclaims.append(
            {
                "metadata": {
                    "name": name,
                    "labels": {wellknown.LABEL_NODEPOOL: nodepool},
                    "creationTimestamp": created,
                },
                "spec": {"expireAfter": "720h"},
                "status": {
                    "nodeName": name,
                    "providerID": f"fake://{name}",
                    "conditions": conditions,
                },
            }
        )
        return name

    def pod(
        self,
        name: str,
        node: str,
        *,
        cpu: str = "500m",
        memory: str = "512Mi",
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        spread_zones: bool = False,
        daemonset: bool = False,
        priority: int | None = None,
    ) -> None:
        meta: dict[str, Any] = {
            "name": name,
            "namespace": "default",
            "labels": dict(labels or {"app": name.rsplit("-", 1)[0]}),
            "annotations": dict(annotations or {}),
            "creationTimestamp": format_timestamp(NOW - timedelta(minutes=30)),
        }
        if daemonset:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": "ds",
                    "uid": "ds",
                    "controller": True,
                }
            ]
        spec: dict[str, Any] = {
            "nodeName": node,
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ],
        }
        if priority is not None:
            spec["priority"] = priority
        if spread_zones:
            spec["topologySpreadConstraints"] = [
                {
                    "maxSkew": 1,
                    "topologyKey": wellknown.LABEL_TOPOLOGY_ZONE,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": dict(meta["labels"])},
                }
            ]
        self.pods.append(
            {
                "metadata": meta,
                "spec": spec,
                "status": {"phase": "Running", "startTime": meta["creationTimestamp"]},
            }
        )

    def pending_pod(self, name: str, *, cpu: str = "500m", memory: str = "512Mi") -> None:
        """A pod kube-scheduler could not place (``PodScheduled=False/Unschedulable``)."""
        self.pod(name, "", cpu=cpu, memory=memory)
        pod = self.pods[-1]
        pod["spec"].pop("nodeName")
        pod["status"] = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }

    def pdb(self, name: str, selector: Mapping[str, str], allowed: int) -> None:
        self.pdbs.append(
            {
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"selector": {"matchLabels": dict(selector)}},
                "status": {"disruptionsAllowed": allowed},
            }
        )

    def plan(
        self,
        *,
        now: datetime = NOW,
        protected: Iterable[str] = (),
        blocked: Mapping[str, str] | None = None,
        spot_to_spot: bool = False,
    ) -> PassReport:
        inventories = [
            NodePoolInventory(name, "default", NodePool.model_validate(raw), raw, self.types)
            for name in ("default", *self.others)
            for raw in (self.pool(name),)
        ]
        snapshot = ClusterSnapshot(
            pods=self.pods, nodes=self.nodes, nodeclaims=self.nodeclaims, daemonsets=[]
        )
        clock = FakeClock(now)
        return plan(
            snapshot,
            inventories,
            self.pdbs,
            now=now,
            clock=clock,
            protected=frozenset(protected),
            blocked=(lambda _candidates: dict(blocked)) if blocked is not None else None,
            settings=PassSettings(spot_to_spot=spot_to_spot),
        )
