"""A CAPZ cluster with the CAPI emulation (stock CAPZ's MachinePool behaviour), the
``generic_capi`` and ``capz`` plugins, a ``CAPZMachinePool`` NodeClass and a NodePool, and the
core's side of the launch contract by hand (as ``tests.plugins.generic_capi.env`` does it).

Azure is the simulator's (``karpenter_capi.sim.azure``) (eastus: D4s_v5 at $0.192/h on-demand and
$0.0384/h Spot, D2ps_v5 (Arm) at $0.077/$0.0154, E4s_v5 not in zone 2, ...).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.hookspecs import LaunchResult
from karpenter_capi.core.kube import (
    CLUSTER_API_NODE_CLASSES,
    CLUSTERS,
    MACHINE_POOLS,
    MACHINES,
    NODECLAIMS,
    NODEPOOLS,
    JsonObject,
)
from karpenter_capi.core.lifecycle.launch import claim_requirements, launchable_instance_types
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.plugins.capz.plugin import CapzPlugin
from karpenter_capi.plugins.capz.pools import AZURE_MACHINE_POOLS, KUBEADM_CONFIGS, LABEL_LAUNCH
from karpenter_capi.plugins.generic_capi.binding import ANNOTATION_NODECLAIM
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from karpenter_capi.sim.capi import EmulationSettings, add_capi_emulation
from tests.plugins.capz.env import INFRA, CapzWorld, azure_machine_template

NAMESPACE = "default"
NODECLASS_REF = {
    "group": wellknown.NODECLASS_GROUP,
    "kind": wellknown.NODECLASS_KIND,
    "name": "azure",
}


def launch_objects() -> list[JsonObject]:
    """The templates the NodeClass names, and the Cluster's version (its topology)."""
    return [
        azure_machine_template("workers", "Standard_B2s"),
        {
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
            "kind": "KubeadmConfigTemplate",
            "metadata": {"name": "workers", "namespace": NAMESPACE},
            "spec": {
                "template": {
                    "spec": {
                        "joinConfiguration": {
                            "nodeRegistration": {"kubeletExtraArgs": [
                                {"name": "cloud-provider", "value": "external"}
                            ]}
                        }
                    }
                }
            },
        },
    ]  # fmt: skip


@dataclass
class PoolsEnv:
    world: CapzWorld
    manager: Manager
    options: dict[str, str]
    plugin: CapzPlugin = field(init=False)
    plugins: Plugins = field(init=False)
    _driver: SteppedDriver | None = None
    plugin_client: Any = None
    """What the plugins talk to (the API itself unless a test wraps it)."""

    def __post_init__(self) -> None:
        self.restart()

    @property
    def api(self) -> Any:
        return self.world.server

    @property
    def driver(self) -> SteppedDriver:
        if self._driver is None:
            self._driver = SteppedDriver(self.manager)
        return self._driver

    def restart(self) -> None:
        """A new process: new plugin objects, new contexts, empty memory."""
        self.plugin = CapzPlugin(**self.world.provider_options())
        self.plugins = Plugins.from_objects(
            [("generic_capi", GenericCapiPlugin), ("capz", self.plugin)],
            PluginEnvironment(
                workload=self.plugin_client or self.api,
                management=self.plugin_client or self.api,
                clock=self.world.clock,
                logger=logging.getLogger("test.capz.pools"),
                options={"capz": dict(self.options), "generic_capi": {}},
            ),
        )

    def use_client(self, client: Any) -> None:
        """Let the plugins talk through ``client`` from now on (a restart)."""
        self.plugin_client = client
        self.restart()

    # --- objects ----------------------------------------------------------------------------

    def nodeclaim(
        self,
        name: str,
        *,
        instance_types: Sequence[str] = ("Standard_D4s_v5",),
        capacity_types: Sequence[str] = (wellknown.CAPACITY_TYPE_ON_DEMAND,),
        zones: Sequence[str] | None = None,
    ) -> JsonObject:
        requirements: list[JsonObject] = [
            {"key": wellknown.LABEL_NODEPOOL, "operator": "In", "values": ["general"]},
            {"key": wellknown.LABEL_INSTANCE_TYPE, "operator": "In", "values": [*instance_types]},
            {"key": wellknown.LABEL_CAPACITY_TYPE, "operator": "In", "values": [*capacity_types]},
        ]
        if zones:
            requirements.append(
                {"key": wellknown.LABEL_TOPOLOGY_ZONE, "operator": "In", "values": [*zones]}
            )
        return self.api.create(
            NODECLAIMS,
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {
                    "name": name,
                    "labels": {wellknown.LABEL_NODEPOOL: "general"},
                    "finalizers": [wellknown.FINALIZER_TERMINATION],
                },
                "spec": {
                    "nodeClassRef": NODECLASS_REF,
                    "requirements": requirements,
                    "resources": {"requests": {"cpu": "500m"}},
                },
            },
        )

    # --- the core's side, by hand -----------------------------------------------------------

    def models(self) -> tuple[ClusterAPINodeClass, NodePool]:
        nodeclass = ClusterAPINodeClass.model_validate(
            self.api.get(CLUSTER_API_NODE_CLASSES, "azure")
        )
        return nodeclass, NodePool.model_validate(self.api.get(NODEPOOLS, "general"))

    def launch(self, name: str, *, record: bool = True) -> LaunchResult:
        raw = self.api.get(NODECLAIMS, name)
        nodeclass, nodepool = self.models()
        inventory = self.plugins.instance_types(nodeclass, nodepool)
        allowed = launchable_instance_types(inventory, claim_requirements(raw))
        result = self.plugins.create(NodeClaim.model_validate(raw), allowed, nodeclass)
        if record:
            self.record(name, result)
        return result

    def record(self, name: str, result: LaunchResult) -> None:
        labels = {
            wellknown.LABEL_INSTANCE_TYPE: result.instance_type,
            wellknown.LABEL_CAPACITY_TYPE: result.capacity_type,
        }
        if result.zone:
            labels[wellknown.LABEL_TOPOLOGY_ZONE] = result.zone
        self.api.patch(
            NODECLAIMS,
            name,
            {"metadata": {"labels": labels, "annotations": {**result.annotations}}},
        )
        if result.provider_id:
            self.api.patch(
                NODECLAIMS,
                name,
                {"status": {"providerID": result.provider_id}},
                subresource="status",
            )

    def launch_all(self, names: Sequence[str], *, rounds: int = 20, step: float = 5.0) -> None:
        for _ in range(rounds):
            pending = [n for n in names if not self.provider_id(n)]
            if not pending:
                return
            for name in pending:
                self.launch(name)
            self.driver.advance(step)
        missing = [n for n in names if not self.provider_id(n)]
        raise AssertionError(f"not launched after {rounds} rounds: {missing}")

    def delete(self, name: str) -> bool | None:
        raw = self.api.get(NODECLAIMS, name)
        if not raw["metadata"].get("deletionTimestamp"):
            self.api.delete(NODECLAIMS, name)
            raw = self.api.get(NODECLAIMS, name)
        return self.plugins.delete(NodeClaim.model_validate(raw)) and True

    def sweep(self) -> None:
        """The garbage collector's periodic list (which tidies the pools up)."""
        self.plugins.list_instances()

    # --- reads ------------------------------------------------------------------------------

    def claim(self, name: str) -> JsonObject:
        return self.api.get(NODECLAIMS, name)

    def provider_id(self, name: str) -> str:
        return str((self.claim(name).get("status") or {}).get("providerID") or "")

    def pools(self) -> dict[str, JsonObject]:
        items = self.api.list(
            MACHINE_POOLS, NAMESPACE, label_selector=f"{LABEL_LAUNCH}=CAPZMachinePool"
        ).items
        return {p["metadata"]["name"]: p for p in items}

    def pool_of(self, name: str) -> JsonObject:
        """The MachinePool NodeClaim ``name`` waits on or was launched from."""
        intent = self.claim(name)["metadata"]["annotations"][
            "karpenter.cluster.x-k8s.io/scalable-resource"
        ]
        return self.pools()[intent.split("/")[2]]

    def azure_pool(self, name: str) -> JsonObject:
        return self.api.get(AZURE_MACHINE_POOLS, name, NAMESPACE)

    def kubeadm_config(self, name: str) -> JsonObject:
        return self.api.get(KUBEADM_CONFIGS, name, NAMESPACE)

    def machines(self, *, live: bool = True) -> list[JsonObject]:
        items = self.api.list(MACHINES, NAMESPACE).items
        return [m for m in items if not (live and m["metadata"].get("deletionTimestamp"))]

    def bindings(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for machine in self.machines(live=False):
            claim = (machine["metadata"].get("annotations") or {}).get(ANNOTATION_NODECLAIM)
            if claim:
                found.setdefault(claim, []).append(machine["metadata"]["name"])
        return found


def new_env(
    *,
    options: Mapping[str, str] | None = None,
    unavailable: frozenset[str] = frozenset(),
    **emulation: Any,
) -> PoolsEnv:
    world = CapzWorld.new()
    world.server.apply_manifests(launch_objects())
    # The Cluster's Kubernetes version, where a ClusterClass-based Cluster states it.
    world.server.patch(
        CLUSTERS,
        "prod",
        {"spec": {"topology": {"version": "v1.31.0"}}},
        NAMESPACE,
    )
    manager = Manager(world.server, clock=world.clock)
    settings = EmulationSettings(nodes=True, azure_unavailable_sizes=unavailable)
    add_capi_emulation(manager, settings, **emulation)
    world.server.create(
        CLUSTER_API_NODE_CLASSES,
        {
            "apiVersion": wellknown.NODECLASS_API_VERSION,
            "kind": wellknown.NODECLASS_KIND,
            "metadata": {"name": "azure"},
            "spec": {
                "launch": {
                    "mode": "CAPZMachinePool",
                    "clusterName": "prod",
                    "namespace": NAMESPACE,
                    "infrastructureTemplateRef": {
                        "kind": "AzureMachineTemplate",
                        "name": "workers",
                        "apiVersion": f"{INFRA}/v1beta1",
                    },
                    "bootstrapConfigTemplateRef": {
                        "kind": "KubeadmConfigTemplate",
                        "name": "workers",
                    },
                }
            },
        },
    )
    world.server.create(
        NODEPOOLS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "general"},
            "spec": {"template": {"spec": {"nodeClassRef": NODECLASS_REF, "requirements": []}}},
        },
    )
    return PoolsEnv(world, manager, dict(options or {}))
