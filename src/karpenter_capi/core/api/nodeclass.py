"""``karpenter.cluster.x-k8s.io/v1alpha1`` ClusterAPINodeClass.

The NodeClass tells the generic Cluster API provider which scalable resources
(MachineDeployments, MachineSets, MachinePools) a NodePool may grow, through a label selector.
It is the same API as the Go provider (kubernetes-sigs/karpenter-provider-cluster-api), so a
cluster can switch between the two without rewriting its NodeClasses. Unlike upstream, the
status carries conditions, so a selector that matches nothing is reported where users look.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import Field

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.meta import (
    Condition,
    KubeModel,
    LabelSelector,
    TypedObject,
    find_condition,
)


class NodeClassConditionType(StrEnum):
    READY = "Ready"


class ClusterAPINodeClassSpec(KubeModel):
    """ClusterAPINodeClassSpec is the top level specification for ClusterAPINodeClasses."""

    scalable_resource_selector: LabelSelector = Field(default_factory=LabelSelector)
    """Selects the Cluster API scalable resources that take part in provisioning."""


class ClusterAPINodeClassStatus(KubeModel):
    """ClusterAPINodeClassStatus is the status for ClusterAPINodeClasses."""

    conditions: list[Condition] = Field(default_factory=list)
    """Signals for health and readiness."""


class ClusterAPINodeClass(TypedObject):
    """ClusterAPINodeClass is the Schema for the ClusterAPINodeClass API."""

    API_VERSION: ClassVar[str] = wellknown.NODECLASS_API_VERSION
    KIND: ClassVar[str] = wellknown.NODECLASS_KIND

    spec: ClusterAPINodeClassSpec = Field(default_factory=ClusterAPINodeClassSpec)
    status: ClusterAPINodeClassStatus = Field(default_factory=ClusterAPINodeClassStatus)

    def condition(self, condition_type: str) -> Condition | None:
        return find_condition(self.status.conditions, condition_type)
