"""The Karpenter-compatible API (NodePool, NodeClaim, ClusterAPINodeClass) and the narrow
read-only views of Kubernetes and Cluster API objects the controller reads.

Plugins may import this package; it depends on nothing else in the project but ``core.clock``.
Submodules: ``wellknown`` (label/annotation/taint names), ``duration``, ``meta`` (shared
pieces), ``nodepool``, ``nodeclaim``, ``nodeclass``, ``views`` (Pod, Node), ``capi_views``
(Machine, MachineDeployment, MachineSet, MachinePool) and ``crds`` (CRDs from the models).
"""

from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool

__all__ = ["ClusterAPINodeClass", "NodeClaim", "NodePool"]
