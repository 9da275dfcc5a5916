"""The structural schemas of CAPA's ``AWSMachine`` and ``AWSMachineTemplate`` (v1beta2), as the
simulated server serves them.

The ``capa`` plugin reads a user's AWSMachineTemplate and writes an AWSMachine from it. Over an
open schema a field CAPA's CRD does not know would be stored, and an AWSMachine CAPA's CRD
refuses (no ``instanceType``, a capacity reservation on a spot instance) admitted; a real API
server prunes the first and refuses the others before CAPA's webhooks see them. The schema
lists every field of ``AWSMachineSpec`` (so pruning drops exactly what upstream drops), types
``instanceType`` (required) and ``additionalTags`` (a map of strings), keeps the content of the
others open, and carries the spec's CEL rules.

Upstream: cluster-api-provider-aws
config/crd/bases/infrastructure.cluster.x-k8s.io_awsmachines.yaml and
infrastructure.cluster.x-k8s.io_awsmachinetemplates.yaml (v1beta2: ``spec`` requires
``instanceType``; ``capacityReservationId may not be set when marketType is Spot``;
``capacityReservationId cannot be set when spotMarketOptions is specified``; a template
requires ``spec.template`` and ``spec.template.spec``).
"""

from __future__ import annotations

from typing import Any, Final

JsonObject = dict[str, Any]

_OPEN: Final[JsonObject] = {"x-kubernetes-preserve-unknown-fields": True}
_SPEC_FIELDS: Final = (
    "additionalSecurityGroups",
    "ami",
    "capacityReservationId",
    "capacityReservationPreference",
    "cloudInit",
    "cpuOptions",
    "dynamicHostAllocation",
    "elasticIpPool",
    "hostAffinity",
    "hostID",
    "iamInstanceProfile",
    "ignition",
    "imageLookupBaseOS",
    "imageLookupFormat",
    "imageLookupOrg",
    "instanceID",
    "instanceMetadataOptions",
    "marketType",
    "networkInterfaceType",
    "networkInterfaces",
    "nonRootVolumes",
    "placementGroupName",
    "placementGroupPartition",
    "privateDnsName",
    "providerID",
    "publicIP",
    "rootVolume",
    "securityGroupOverrides",
    "spotMarketOptions",
    "sshKeyName",
    "subnet",
    "tenancy",
    "uncompressedUserData",
)
_RULES: Final = (
    {
        "rule": "!has(self.capacityReservationId) || !has(self.marketType) || "
        "self.marketType != 'Spot'",
        "message": "capacityReservationId may not be set when marketType is Spot",
    },
    {
        "rule": "!has(self.capacityReservationId) || !has(self.spotMarketOptions)",
        "message": "capacityReservationId cannot be set when spotMarketOptions is specified",
    },
)


def machine_spec() -> JsonObject:
    """``AWSMachineSpec``: an AWSMachine's ``spec``, a template's ``spec.template.spec``."""
    return {
        "type": "object",
        "required": ["instanceType"],
        "properties": {
            **{name: dict(_OPEN) for name in _SPEC_FIELDS},
            "instanceType": {"type": "string", "minLength": 2},
            "additionalTags": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "x-kubernetes-validations": [dict(rule) for rule in _RULES],
    }


def aws_machine() -> JsonObject:
    """``AWSMachine``'s v1beta2 ``openAPIV3Schema``."""
    return {
        "type": "object",
        "properties": {"spec": machine_spec(), "status": {"type": "object", **_OPEN}},
    }


def aws_machine_template() -> JsonObject:
    """``AWSMachineTemplate``'s v1beta2 ``openAPIV3Schema``."""
    template = {
        "type": "object",
        "required": ["spec"],
        "properties": {"metadata": {"type": "object", **_OPEN}, "spec": machine_spec()},
    }
    return {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["template"],
                "properties": {"template": template},
            },
            "status": {"type": "object", **_OPEN},
        },
    }
