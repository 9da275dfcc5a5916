"""What an EKS node reserves for itself, and whether a cluster is EKS.

EKS node images size kube-reserved from the instance (the formula upstream Karpenter also uses
for EKS): CPU 6% of the first core, 1% of the second, 0.5% of the next two and 0.25% of the
rest; memory 255Mi plus 11Mi per pod the node can hold; 1Gi of ephemeral storage; with the
kubelet's hard eviction thresholds (memory 100Mi, node filesystem 10%). Only EKS nodes do: a
self-managed (kubeadm) cluster on AWS reserves what its bootstrap config says, which
``generic_capi`` reads itself. So ``capa`` offers this formula only for a scalable resource
whose ``Cluster``'s ``spec.controlPlaneRef`` is an ``AWSManagedControlPlane``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Final

from karpenter_capi.plugin_api import InstanceTypeOverhead, ResourceList

SOURCE_EKS: Final = "EKS"
EKS_CONTROL_PLANE_KIND: Final = "AWSManagedControlPlane"

_MIB: Final = 1024 * 1024
_GIB: Final = 1024 * _MIB
_DEFAULT_MAX_PODS: Final = 110
# (from millicores, to millicores, share reserved): the EKS kube-reserved CPU schedule.
_CPU_STEPS: Final = (
    (0, 1000, Fraction(6, 100)),
    (1000, 2000, Fraction(1, 100)),
    (2000, 4000, Fraction(5, 1000)),
    (4000, None, Fraction(25, 10000)),
)


def eks_overhead(capacity: ResourceList) -> InstanceTypeOverhead:
    """kube-reserved and eviction thresholds of an EKS node of ``capacity``."""
    millis = capacity.milli("cpu")
    cpu = sum(
        (
            (min(millis, upper if upper is not None else millis) - lower) * share
            for lower, upper, share in _CPU_STEPS
            if millis > lower
        ),
        Fraction(0),
    )
    pods = capacity.value("pods") if "pods" in capacity else _DEFAULT_MAX_PODS
    kube = {"cpu": int(cpu), "memory": (255 + 11 * pods) * _MIB * 1000}  # whole millicores
    eviction = {"memory": 100 * _MIB * 1000}
    if "ephemeral-storage" in capacity:
        kube["ephemeral-storage"] = _GIB * 1000
        eviction["ephemeral-storage"] = math.ceil(capacity.milli("ephemeral-storage") / 10)
    return InstanceTypeOverhead(
        kube_reserved=ResourceList.from_milli(kube),
        eviction_threshold=ResourceList.from_milli(eviction),
        source=SOURCE_EKS,
    )
