"""``karpenter.sh/v1`` NodeClaim: one requested node, from launch to termination.

The NodeClaim is the controller's unit of intent and memory: the provisioner writes the spec (the
NodePool template narrowed to one shape), the lifecycle controllers write the status (provider
ID, node name, capacity, conditions). Field names, defaults and printer columns follow upstream
Karpenter v1 (``pkg/apis/v1/nodeclaim.go``, ``nodeclaim_status.go``) so ``kubectl get
nodeclaims`` reads the same as with Karpenter.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Final

from pydantic import Field, ValidationError

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.duration import Duration, NillableDuration
from karpenter_capi.core.api.meta import (
    ATOMIC_LIST,
    CONDITIONS_LIST_MAP,
    REQUIREMENTS_LIST,
    Condition,
    KubeModel,
    LooseCondition,
    NodeClassReference,
    NodeSelectorRequirementWithMinValues,
    ResourceList,
    Taint,
    Timestamp,
    TypedObject,
    find_condition,
    validation_problems,
)
from karpenter_capi.core.api.nodepool import DEFAULT_EXPIRE_AFTER

NODECLAIM_MAX_REQUIREMENTS: Final = 100
"""The CRD's ``maxItems`` for ``spec.requirements`` (upstream's, since v1.0)."""


class NodeClaimConditionType(StrEnum):
    LAUNCHED = "Launched"
    REGISTERED = "Registered"
    INITIALIZED = "Initialized"
    READY = "Ready"
    DRIFTED = "Drifted"
    CONSOLIDATABLE = "Consolidatable"
    EMPTY = "Empty"
    # Set while the node is being disrupted; upstream names it DisruptionReason (its reason
    # says why: Drifted, Underutilized, Empty, Expired).
    DISRUPTION_REASON = "DisruptionReason"
    DISRUPTING = "Disrupting"
    INSTANCE_TERMINATING = "InstanceTerminating"
    CONSISTENT_STATE_FOUND = "ConsistentStateFound"


# The conditions whose conjunction is Ready (upstream ``StatusConditions``).
READINESS_CONDITIONS = (
    NodeClaimConditionType.LAUNCHED,
    NodeClaimConditionType.REGISTERED,
    NodeClaimConditionType.INITIALIZED,
)


class ResourceRequirements(KubeModel):
    requests: ResourceList = Field(default_factory=dict)
    """The minimum resources the NodeClaim's node must provide."""


class NodeClaimSpec(KubeModel):
    """NodeClaimSpec describes the desired state of the NodeClaim."""

    taints: Annotated[list[Taint], Field(json_schema_extra=ATOMIC_LIST)] = Field(
        default_factory=list
    )
    """Taints applied to the node."""
    startup_taints: Annotated[list[Taint], Field(json_schema_extra=ATOMIC_LIST)] = Field(
        default_factory=list
    )
    """Taints expected to be removed by a daemon after startup; ignored when provisioning."""
    requirements: Annotated[
        list[NodeSelectorRequirementWithMinValues],
        Field(max_length=NODECLAIM_MAX_REQUIREMENTS, json_schema_extra=REQUIREMENTS_LIST),
    ]
    """Constraints on the node's labels."""
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    """Resources the node must offer to fit the pods it was launched for."""
    node_class_ref: NodeClassReference
    """The provider-specific configuration used to launch the node."""
    termination_grace_period: Duration | None = None
    """Longest time draining may take before pods are forcibly deleted; unlimited when unset."""
    expire_after: Annotated[
        NillableDuration, Field(json_schema_extra={"x-crd-default": DEFAULT_EXPIRE_AFTER})
    ] = Field(default_factory=lambda: NillableDuration(DEFAULT_EXPIRE_AFTER))
    """Age at which the node is replaced, or 'Never'."""


class NodeClaimStatus(KubeModel):
    """NodeClaimStatus defines the observed state of NodeClaim."""

    node_name: str | None = None
    """Name of the corresponding Node."""
    provider_id: Annotated[str | None, Field(alias="providerID")] = None
    """Provider ID of the corresponding Node (and Machine)."""
    image_id: Annotated[str | None, Field(alias="imageID")] = None
    """Identifier of the image the node runs."""
    capacity: ResourceList = Field(default_factory=dict)
    """Estimated full capacity of the node."""
    allocatable: ResourceList = Field(default_factory=dict)
    """Estimated allocatable capacity of the node."""
    conditions: Annotated[list[LooseCondition], Field(json_schema_extra=CONDITIONS_LIST_MAP)] = (
        Field(default_factory=list)
    )
    """Signals for health and readiness."""
    last_pod_event_time: Timestamp | None = None
    """Last time a pod was scheduled to or removed from the node."""


class NodeClaim(TypedObject):
    """NodeClaim is the Schema for the NodeClaims API."""

    API_VERSION: ClassVar[str] = wellknown.KARPENTER_API_VERSION
    KIND: ClassVar[str] = "NodeClaim"

    spec: Annotated[
        NodeClaimSpec,
        Field(
            json_schema_extra={
                "x-kubernetes-validations": [
                    {"message": "spec is immutable", "rule": "self == oldSelf"}
                ]
            }
        ),
    ]
    status: NodeClaimStatus = Field(default_factory=NodeClaimStatus)

    def condition(self, condition_type: str) -> Condition | None:
        return find_condition(self.status.conditions, condition_type)

    def is_condition_true(self, condition_type: str) -> bool:
        found = self.condition(condition_type)
        return found is not None and found.is_true

    @property
    def nodepool_name(self) -> str | None:
        return self.metadata.labels.get(wellknown.LABEL_NODEPOOL)

    @property
    def is_deleting(self) -> bool:
        return self.metadata.deletion_timestamp is not None


# A best-effort reading drops what does not validate; these stand in for required fields it
# dropped, so the rest (name, providerID, labels, annotations) still reaches a plugin.
_STAND_INS: Final[Mapping[str, Any]] = {
    "requirements": [],
    "nodeClassRef": {"group": "unreadable", "kind": "unreadable", "name": "unreadable"},
}
# Each pass drops at least one field; a NodeClaim has far fewer leaves that can fail at once.
_READ_PASSES: Final = 20


def readable_nodeclaim(raw: Mapping[str, Any]) -> tuple[NodeClaim, list[str]]:
    """``raw`` as a model, and what about it does not validate (``path: reason`` lines).

    A NodeClaim our model refuses (created under upstream's CRDs, which admit durations no
    ``timedelta`` holds, or written by hand) must still be terminated: its machine released
    through the plugins, its finalizer removed. Each field that fails validation is dropped
    (a required one gets a stand-in) until the rest validates. Raises ``ValidationError``
    when even that fails (the metadata itself is unreadable).
    """
    try:
        return NodeClaim.model_validate(raw), []
    except ValidationError as error:
        problems = validation_problems(error)
        failed = error
    body = copy.deepcopy(dict(raw))
    for _ in range(_READ_PASSES):
        # Every failing field in one pass (a short-circuit would drop one per pass).
        dropped = [_drop(body, item["loc"], item["type"]) for item in failed.errors()]
        if not any(dropped):
            break
        try:
            return NodeClaim.model_validate(body), problems
        except ValidationError as error:
            failed = error
    raise failed


def _drop(body: dict[str, Any], loc: Sequence[int | str], kind: str) -> bool:
    """Remove (or, when missing, stand in for) the value at the deepest part of ``loc`` that
    exists in ``body``; False when nothing could be changed."""
    parent: Any = None
    node: Any = body
    last: int | str | None = None
    for part in loc:
        in_dict = isinstance(node, dict) and isinstance(part, str) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_dict or in_list:
            parent, node, last = node, node[part], part
        elif kind == "missing" and isinstance(node, dict) and isinstance(part, str):
            if part not in _STAND_INS:
                break
            node[part] = copy.deepcopy(_STAND_INS[part])
            return True
        else:
            break
    if parent is None or last is None or last == "metadata":
        return False
    if isinstance(last, str) and last in _STAND_INS and node != _STAND_INS[last]:
        parent[last] = copy.deepcopy(_STAND_INS[last])
    else:
        del parent[last]
    return True
