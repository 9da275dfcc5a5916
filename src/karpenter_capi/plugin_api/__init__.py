"""The public surface for plugin authors: everything a provider plugin may import.

A third party's plugin imports from here and nowhere else in ``karpenter_capi``; every other
module is private to this distribution and may change in any release. What is here is the
contract of docs/plugins.md: the ``hookimpl`` marker, the context a hook receives, the types a
hook takes and returns, the provider errors a hook raises to say what happened, and the facade
a plugin's own tests load it through. ``tests/core/plugin_host/test_public_api.py`` pins the
list, so a name is added or removed on purpose.

The hook specifications themselves (their signatures and rules) are documented in
``karpenter_capi.core.hookspecs`` and docs/plugins.md.
"""

from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.clock import Clock, FakeClock
from karpenter_capi.core.errors import (
    InstanceNotFoundError,
    InsufficientCapacityError,
    NodeClassNotReadyError,
    ProviderError,
    RetryableCreateError,
)
from karpenter_capi.core.hookspecs import (
    INSTANCE_STOPPED,
    INSTANCE_TERMINATED,
    REBALANCE_RECOMMENDATION,
    SCHEDULED_CHANGE,
    SPOT_INTERRUPTED,
    ClusterState,
    DescribeMachineTemplate,
    Instance,
    InterruptionNotice,
    LaunchResult,
    LaunchWatch,
    MachineTemplateDescription,
    NodeClass,
    PluginContext,
    hookimpl,
)
from karpenter_capi.core.instancetype import InstanceType, InstanceTypeOverhead, Offering
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.core.plugin_host import (
    PluginCallError,
    PluginEnvironment,
    PluginError,
    PluginResultError,
    Plugins,
)
from karpenter_capi.core.values.quantity import Quantity, parse_quantity
from karpenter_capi.core.values.resources import ResourceList

__all__ = [
    "INSTANCE_STOPPED",
    "INSTANCE_TERMINATED",
    "REBALANCE_RECOMMENDATION",
    "SCHEDULED_CHANGE",
    "SPOT_INTERRUPTED",
    "Clock",
    "ClusterAPINodeClass",
    "ClusterState",
    "DescribeMachineTemplate",
    "FakeClock",
    "Instance",
    "InstanceNotFoundError",
    "InstanceType",
    "InstanceTypeOverhead",
    "InsufficientCapacityError",
    "InterruptionNotice",
    "KubeClient",
    "LaunchResult",
    "LaunchWatch",
    "MachineTemplateDescription",
    "NodeClaim",
    "NodeClass",
    "NodeClassNotReadyError",
    "NodePool",
    "Offering",
    "PluginCallError",
    "PluginContext",
    "PluginEnvironment",
    "PluginError",
    "PluginResultError",
    "Plugins",
    "ProviderError",
    "Quantity",
    "Resource",
    "ResourceList",
    "RetryableCreateError",
    "hookimpl",
    "parse_quantity",
]
