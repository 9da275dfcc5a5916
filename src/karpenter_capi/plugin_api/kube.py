"""Kubernetes for plugin authors: the client port, its errors, and the resources a provider
plugin reads and writes.

A plugin gets its clients from ``PluginContext`` (``ctx.workload`` and ``ctx.management``);
what it needs to use them is here: the ``KubeClient`` port and its JSON and precondition
types, the errors every transport raises for kube's status codes, the core and Cluster API
resource descriptors (``capi_resources`` finds the versions a management cluster serves), the
Event recorder, and the label keys CAPI puts on the Machines of a scalable resource. Like the
rest of ``karpenter_capi.plugin_api``, the list is pinned by
``tests/core/plugin_host/test_public_api.py``.
"""

from karpenter_capi.core.kube.cache import object_key
from karpenter_capi.core.kube.client import JsonObject, KubeClient, Preconditions
from karpenter_capi.core.kube.discovery import CapiResources, capi_resources
from karpenter_capi.core.kube.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Gone,
    NotFound,
    ServiceUnavailable,
    Timeout,
    error_from_status,
    unreachable,
)
from karpenter_capi.core.kube.events import NORMAL, WARNING, EventRecorder
from karpenter_capi.core.kube.indexes import (
    DEPLOYMENT_NAME_LABEL,
    POOL_NAME_LABEL,
    SET_NAME_LABEL,
)
from karpenter_capi.core.kube.resources import (
    CAPI_GROUP,
    CAPI_INFRASTRUCTURE_GROUP,
    CAPI_NODECLASS_GROUP,
    CLUSTER_API_NODE_CLASSES,
    CONFIGMAPS,
    NODECLAIMS,
    NODES,
    SECRETS,
    Resource,
)
from karpenter_capi.core.kube.writelog import WriteLog, Written
from karpenter_capi.core.values.selectors import (
    EVERYTHING,
    CompiledSelector,
    SelectorError,
    compile_selector,
    selector_to_string,
)

__all__ = [
    "CAPI_GROUP",
    "CAPI_INFRASTRUCTURE_GROUP",
    "CAPI_NODECLASS_GROUP",
    "CLUSTER_API_NODE_CLASSES",
    "CONFIGMAPS",
    "DEPLOYMENT_NAME_LABEL",
    "EVERYTHING",
    "NODECLAIMS",
    "NODES",
    "NORMAL",
    "POOL_NAME_LABEL",
    "SECRETS",
    "SET_NAME_LABEL",
    "WARNING",
    "AlreadyExists",
    "ApiError",
    "CapiResources",
    "CompiledSelector",
    "Conflict",
    "EventRecorder",
    "Gone",
    "JsonObject",
    "KubeClient",
    "NotFound",
    "Preconditions",
    "Resource",
    "SelectorError",
    "ServiceUnavailable",
    "Timeout",
    "WriteLog",
    "Written",
    "capi_resources",
    "compile_selector",
    "error_from_status",
    "object_key",
    "selector_to_string",
    "unreachable",
]
