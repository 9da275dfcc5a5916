"""The Karpenter-compatible API (NodePool, NodeClaim, ClusterAPINodeClass) and the narrow
read-only Pod view node termination drains with.

Plugins may import this package; it depends on nothing else in the project but ``core.clock``.
Submodules: ``wellknown`` (label/annotation/taint names), ``duration``, ``meta`` (shared
pieces), ``nodepool``, ``nodeclaim``, ``nodeclass``, ``views`` (the drain's Pod view) and
``crds`` (CRDs from the models).
"""

from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool

__all__ = ["ClusterAPINodeClass", "NodeClaim", "NodePool"]
