"""``karpenter.cluster.x-k8s.io/v1alpha1`` ClusterAPINodeClass.

The NodeClass tells the generic Cluster API provider which scalable resources
(MachineDeployments, MachineSets, MachinePools) a NodePool may grow, through a label selector.
It is the same API as the Go provider (kubernetes-sigs/karpenter-provider-cluster-api), so a
cluster can switch between the two without rewriting its NodeClasses. Unlike upstream, the
status carries conditions, so a selector that matches nothing is reported where users look.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import Field

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.meta import (
    Condition,
    KubeModel,
    LabelSelector,
    TypedObject,
    find_condition,
)


class LaunchMode(StrEnum):
    """How a native plugin launches nodes for this NodeClass (unset: scalable resources)."""

    CAPA_FLEET = "CAPAFleet"
    CAPZ_MACHINE_POOL = "CAPZMachinePool"


class TemplateReference(KubeModel):
    """A namespaced Cluster API template the plugin copies from (never modifies)."""

    kind: Annotated[str, Field(min_length=1)]
    """``AWSMachineTemplate``, ``AzureMachineTemplate``, ``KubeadmConfigTemplate``..."""
    name: Annotated[str, Field(min_length=1)]
    """Name of the template, in the launch's namespace."""
    api_version: str | None = None
    """apiVersion of the template; the plugin's default for the kind when unset."""


class LaunchSpec(KubeModel):
    """Launch nodes through a cloud's own allocation and record them in Cluster API.

    ``CAPAFleet``: one EC2 ``CreateFleet`` per NodeClaim across every compatible offering, the
    instance adopted by stock CAPA through a Machine, a bootstrap config and an AWSMachine.
    ``CAPZMachinePool``: one Flexible-orchestration MachinePool per VM size, priority and zone,
    created at zero replicas from the templates and scaled one node at a time.
    """

    mode: LaunchMode
    """The launch path (and so the plugin that serves it)."""
    cluster_name: Annotated[str, Field(min_length=1)]
    """The Cluster API ``Cluster`` the nodes join."""
    namespace: Annotated[str, Field(min_length=1)]
    """The namespace (management cluster) of the Cluster, its templates and the new objects."""
    infrastructure_template_ref: TemplateReference
    """The machine template the infrastructure objects are stamped from (AMI, disks, IAM
    profile, security groups, image...); its instance type or VM size is replaced by the one
    chosen for each node."""
    bootstrap_config_template_ref: TemplateReference
    """The bootstrap config template (``KubeadmConfigTemplate``) each node's config comes from."""


class ClusterAPINodeClassSpec(KubeModel):
    """ClusterAPINodeClassSpec is the top level specification for ClusterAPINodeClasses."""

    scalable_resource_selector: LabelSelector = Field(default_factory=LabelSelector)
    """Selects the Cluster API scalable resources that take part in provisioning."""
    launch: LaunchSpec | None = None
    """A native launch path (``capa`` or ``capz`` plugin); unset, nodes come from the selected
    scalable resources (``generic_capi``)."""


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
