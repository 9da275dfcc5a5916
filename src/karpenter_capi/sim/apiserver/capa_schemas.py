"""The structural schemas of CAPA's ``AWSMachine`` and ``AWSMachineTemplate`` (v1beta2), as the
simulated server serves them.

The ``capa`` plugin reads a user's AWSMachineTemplate and writes an AWSMachine from it. Over an
open schema a field CAPA's CRD does not know would be stored, and an AWSMachine CAPA's CRD
refuses (no ``instanceType``, a capacity reservation on a spot instance) admitted; a real API
server prunes the first and refuses the others before CAPA's webhooks see them. The schema
lists every field of ``AWSMachineSpec`` (so pruning drops exactly what upstream drops), types
``instanceType`` (required) and ``additionalTags`` (a map of strings), keeps the content of the
others open, and carries the spec's CEL rules. The fields with a ``+kubebuilder:default``
(``hostAffinity: default``, ignition's ``storageType: ClusterObjectStore`` and every
``instanceMetadataOptions`` field) carry it, so the server fills them in as a real one does on
every write, templates included (CAPA has no defaulting webhook for AWSMachineTemplate). Only
v1beta2 is served: upstream's CRDs list v1beta1 with ``served: false``.

Upstream: cluster-api-provider-aws
config/crd/bases/infrastructure.cluster.x-k8s.io_awsmachines.yaml and
infrastructure.cluster.x-k8s.io_awsmachinetemplates.yaml (v1beta2: ``spec`` requires
``instanceType``; ``capacityReservationId may not be set when marketType is Spot``;
``capacityReservationId cannot be set when spotMarketOptions is specified``; a template
requires ``spec.template`` and ``spec.template.spec``), api/v1beta2/awsmachine_types.go
(``AWSMachineSpec.HostAffinity``, ``Ignition.StorageType``) and types.go
(``InstanceMetadataOptions``: the ``+kubebuilder:default`` markers).
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
    "hostID",
    "iamInstanceProfile",
    "imageLookupBaseOS",
    "imageLookupFormat",
    "imageLookupOrg",
    "instanceID",
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


def _defaulted(default: Any, *allowed: Any, kind: str = "string") -> JsonObject:
    """A field with a ``+kubebuilder:default`` (and its enum, when it has one)."""
    field: JsonObject = {"type": kind, "default": default}
    if allowed:
        field["enum"] = list(allowed)
    return field


def _metadata_options() -> JsonObject:
    """``InstanceMetadataOptions``: each field's ``+kubebuilder:default``."""
    return {
        "type": "object",
        "properties": {
            "httpEndpoint": _defaulted("enabled", "enabled", "disabled"),
            "httpProtocolIpv6": _defaulted("disabled", "enabled", "disabled"),
            "httpPutResponseHopLimit": {
                **_defaulted(1, kind="integer"),
                "minimum": 1,
                "maximum": 64,
            },
            "httpTokens": _defaulted("optional", "optional", "required"),
            "instanceMetadataTags": _defaulted("disabled", "enabled", "disabled"),
        },
    }


def machine_spec() -> JsonObject:
    """``AWSMachineSpec``: an AWSMachine's ``spec``, a template's ``spec.template.spec``."""
    return {
        "type": "object",
        "required": ["instanceType"],
        "properties": {
            **{name: dict(_OPEN) for name in _SPEC_FIELDS},
            "instanceType": {"type": "string", "minLength": 2},
            "additionalTags": {"type": "object", "additionalProperties": {"type": "string"}},
            "hostAffinity": _defaulted("default", "default", "host"),
            "ignition": {
                "type": "object",
                **_OPEN,
                "properties": {
                    "storageType": _defaulted(
                        "ClusterObjectStore", "ClusterObjectStore", "UnencryptedUserData"
                    )
                },
            },
            "instanceMetadataOptions": _metadata_options(),
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
