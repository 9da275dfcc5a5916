"""What each NodePool can launch: its NodeClass resolved through the plugins, priced.

Every provisioning pass, and the ``instance-types`` command, needs the same thing: for a
NodePool, fetch the NodeClass its ``nodeClassRef`` names, ask the plugin that serves that kind
for the inventory, and let the pricing chain adjust the offerings. A NodePool whose NodeClass is
missing, invalid or not ready gets an error string instead of instance types, so one broken
NodePool never stops the others.

Where the NodePools and NodeClasses come from is the caller's: the controllers read them from
their informers' caches (``stores``), as upstream's provisioner reads them through
controller-runtime's cached client (``provisioning/provisioner.go: NewScheduler`` lists NodePools
with ``nodepoolutils.ListManaged`` and ``utils/nodepool/nodepool.go: GetNodeClass`` gets the
NodeClass, both through the manager's client, which reads its informer cache), so a look or a
round on a cluster whose objects did not change sends no request for them; the command line
(``instance-types``, ``explain``) and a ``Provisioner`` built without caches read the API.
A NodeClass the cache does not hold is "not found", as the API's 404 was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from karpenter_capi.core.api.meta import validation_problems
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.api.runtime_validation import runtime_problems
from karpenter_capi.core.errors import ProviderError
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.kube.cache import Store
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import ApiError, NotFound, unreachable
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, NODEPOOLS, Resource
from karpenter_capi.core.plugin_host import PluginError, Plugins

Stores = Callable[[Resource], Store[JsonObject]]
"""The informer cache of a workload resource (``ControllerContext.caches.store``)."""


@dataclass
class NodePoolInventory:
    nodepool: str
    nodeclass: str
    model: NodePool | None
    raw: Mapping[str, Any]
    instance_types: list[InstanceType] = field(default_factory=list)
    error: str | None = None
    unreachable: bool = False
    """The error is a server that could not be reached or answer yet (``kube.errors``): it ends
    when the server is back, so the pods it left pending are retried within a second."""

    def to_json(self) -> dict[str, Any]:
        return {
            "nodepool": self.nodepool,
            "nodeclass": self.nodeclass,
            "error": self.error,
            "instanceTypes": [
                {
                    "name": it.name,
                    "capacity": it.capacity.to_dict(),
                    "allocatable": it.allocatable.to_dict(),
                    "requirements": {k: sorted(v) for k, v in sorted(it.requirements.items())},
                    "taints": [str(t) for t in it.taints],
                    "offerings": [
                        {
                            "zone": o.zone,
                            "capacityType": o.capacity_type,
                            "price": o.price,
                            "available": o.available,
                        }
                        for o in it.offerings
                    ],
                }
                for it in self.instance_types
            ],
        }


def _validation_message(exc: ValidationError) -> str:
    problems = validation_problems(exc)
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{problems[0]}{more}"


def nodepools_by_weight(
    client: KubeClient, stores: Stores | None = None
) -> list[Mapping[str, Any]]:
    """NodePools highest weight first, ties by name descending, as upstream's OrderByWeight;
    from ``stores`` when given (read-only objects), else listed."""
    pools: Sequence[Mapping[str, Any]]
    pools = client.list(NODEPOOLS).items if stores is None else stores(NODEPOOLS).list()
    return sorted(
        pools,
        key=lambda p: (int((p.get("spec") or {}).get("weight") or 0), p["metadata"]["name"]),
        reverse=True,
    )


def _nodeclass(client: KubeClient, stores: Stores | None, name: str) -> Mapping[str, Any]:
    """NodeClass ``name`` from ``stores`` when given, else from the API; ``NotFound`` when
    there is none."""
    if stores is None:
        return client.get(CLUSTER_API_NODE_CLASSES, name)
    found = stores(CLUSTER_API_NODE_CLASSES).get(name)
    if found is None:
        raise NotFound(f"clusterapinodeclasses {name!r} not found")
    return found


def resolve_nodepool(
    client: KubeClient,
    plugins: Plugins,
    raw: Mapping[str, Any],
    stores: Stores | None = None,
) -> NodePoolInventory:
    name = str(raw.get("metadata", {}).get("name", ""))
    ref = ((raw.get("spec") or {}).get("template") or {}).get("spec", {}).get("nodeClassRef") or {}
    inventory = NodePoolInventory(name, str(ref.get("name", "")), None, raw)
    try:
        inventory.model = NodePool.model_validate(raw)
    except ValidationError as exc:
        inventory.error = f"invalid NodePool: {_validation_message(exc)}"
        return inventory
    problems = runtime_problems(inventory.model)
    if problems:
        inventory.error = f"invalid NodePool: {'; '.join(problems)}"
        return inventory
    kind, group = ref.get("kind"), ref.get("group")
    if (group, kind) != (CLUSTER_API_NODE_CLASSES.group, CLUSTER_API_NODE_CLASSES.kind):
        inventory.error = f"nodeClassRef {group}/{kind} is not a kind this controller can read"
        return inventory
    try:
        nodeclass = ClusterAPINodeClass.model_validate(
            _nodeclass(client, stores, inventory.nodeclass)
        )
    except NotFound:
        inventory.error = f"ClusterAPINodeClass {inventory.nodeclass} not found"
        return inventory
    except ValidationError as exc:
        inventory.error = (
            f"invalid ClusterAPINodeClass {inventory.nodeclass}: {_validation_message(exc)}"
        )
        return inventory
    try:
        inventory.instance_types = plugins.instance_types(nodeclass, inventory.model)
    except (ProviderError, PluginError, ApiError) as exc:
        inventory.error = str(exc)
        inventory.unreachable = unreachable(exc)
    return inventory


def resolve_inventory(
    client: KubeClient,
    plugins: Plugins,
    nodepool_name: str | None = None,
    *,
    stores: Stores | None = None,
) -> list[NodePoolInventory]:
    """The inventory of every NodePool (or of one), in weight order; NodePools and NodeClasses
    from ``stores`` when given (module docstring), else from the API."""
    pools: Sequence[Mapping[str, Any]]
    if nodepool_name is not None:
        pools = [client.get(NODEPOOLS, nodepool_name)]
    else:
        pools = nodepools_by_weight(client, stores)
    # Errors are in each inventory's ``error``; callers say them (the provisioner logs one
    # WARNING per error while it lasts, not one per round).
    return [resolve_nodepool(client, plugins, raw, stores) for raw in pools]
