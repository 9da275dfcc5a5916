"""The structural schemas of CAPZ's ``AzureMachinePool``, ``AzureMachinePoolMachine`` and
``AzureMachineTemplate`` (v1beta1), as the simulated server serves them.

The ``capz`` plugin writes AzureMachinePools by copying fields of an ``AzureMachineTemplate``;
a real API server prunes a field the CRD does not know, applies CAPZ's defaults and refuses a
missing required field or a value outside an enum. This schema lists every field of the
upstream CRD's ``spec`` and ``spec.template`` (so pruning drops exactly what upstream drops),
types the ones the plugin sets or the emulation reads (``location``, ``orchestrationMode``,
``template.vmSize``, ``template.spotVMOptions``) and keeps the content of the others open.

Upstream: cluster-api-provider-azure
config/crd/bases/infrastructure.cluster.x-k8s.io_azuremachinepools.yaml (``spec`` requires
``location`` and ``template``; ``template`` requires ``osDisk`` and ``vmSize``;
``orchestrationMode`` is ``Flexible`` or ``Uniform``, default ``Uniform``;
``spotVMOptions.evictionPolicy`` is ``Deallocate`` or ``Delete``).

``AzureMachinePoolMachine`` is read by the ``capz`` plugin (its VM's ``provisioningState`` and
error) and written by the emulation: every field of the upstream CRD, typed
(config/crd/bases/infrastructure.cluster.x-k8s.io_azuremachinepoolmachines.yaml: ``spec``
requires ``providerID``; a status condition requires ``type``, ``status`` and
``lastTransitionTime``, its ``reason`` and ``message`` are not empty).

``AzureMachineTemplate``, which the plugin reads and copies from, has its CRD's fields too
(..._azuremachinetemplates.yaml: ``spec.template.spec`` requires ``osDisk`` and ``vmSize``).
"""

from __future__ import annotations

from typing import Any, Final

JsonObject = dict[str, Any]

_OPEN: Final[JsonObject] = {"x-kubernetes-preserve-unknown-fields": True}
_SPEC_FIELDS: Final = (
    "additionalTags",
    "identity",
    "platformFaultDomainCount",
    "providerID",
    "providerIDList",
    "roleAssignmentName",
    "strategy",
    "systemAssignedIdentityRole",
    "userAssignedIdentities",
    "zoneBalance",
)
_TEMPLATE_FIELDS: Final = (
    "acceleratedNetworking",
    "additionalCapabilities",
    "dataDisks",
    "diagnostics",
    "disableVMBootstrapExtension",
    "image",
    "networkInterfaces",
    "osDisk",
    "securityProfile",
    "sshPublicKey",
    "subnetName",
    "terminateNotificationTimeout",
    "vmExtensions",
)
_QUANTITY: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


_MACHINE_FIELDS: Final = (
    "acceleratedNetworking",
    "additionalCapabilities",
    "additionalTags",
    "allocatePublicIP",
    "capacityReservationGroupID",
    "dataDisks",
    "diagnostics",
    "disableExtensionOperations",
    "disableVMBootstrapExtension",
    "dnsServers",
    "enableIPForwarding",
    "failureDomain",
    "identity",
    "image",
    "networkInterfaces",
    "osDisk",
    "providerID",
    "roleAssignmentName",
    "securityProfile",
    "sshPublicKey",
    "subnetName",
    "systemAssignedIdentityRole",
    "userAssignedIdentities",
    "virtualMachineScaleSetID",
    "vmExtensions",
)


def azure_machine_template() -> JsonObject:
    """``AzureMachineTemplate``'s v1beta1 ``openAPIV3Schema``: ``AzureMachineSpec`` under
    ``spec.template.spec`` (``osDisk`` and ``vmSize`` required)."""
    machine = {
        "type": "object",
        "required": ["osDisk", "vmSize"],
        "properties": {
            **dict.fromkeys(_MACHINE_FIELDS, _OPEN),
            "vmSize": {"type": "string"},
            "spotVMOptions": _spot(),
        },
    }
    template = {
        "type": "object",
        "required": ["spec"],
        "properties": {"metadata": {"type": "object", **_OPEN}, "spec": machine},
    }
    return {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["template"],
                "properties": {"template": template},
            },
        },
    }


def _spot() -> JsonObject:
    return {
        "type": "object",
        "properties": {
            "evictionPolicy": {"type": "string", "enum": ["Deallocate", "Delete"]},
            "maxPrice": {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": True,
                "pattern": _QUANTITY,
            },
        },
    }


def azure_machine_pool() -> JsonObject:
    """``AzureMachinePool``'s v1beta1 ``openAPIV3Schema``."""
    template = {
        "type": "object",
        "required": ["osDisk", "vmSize"],
        "properties": {
            **dict.fromkeys(_TEMPLATE_FIELDS, _OPEN),
            "vmSize": {"type": "string"},
            "spotVMOptions": _spot(),
        },
    }
    spec = {
        "type": "object",
        "required": ["location", "template"],
        "properties": {
            **dict.fromkeys(_SPEC_FIELDS, _OPEN),
            "location": {"type": "string"},
            "orchestrationMode": {
                "type": "string",
                "enum": ["Flexible", "Uniform"],
                "default": "Uniform",
            },
            "template": template,
        },
    }
    return {
        "type": "object",
        "properties": {"spec": spec, "status": {"type": "object", **_OPEN}},
    }


def _conditions() -> JsonObject:
    """Cluster API v1beta1 conditions, as CAPZ's CRDs embed them."""
    text = {"type": "string", "minLength": 1}
    return {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["lastTransitionTime", "status", "type"],
            "properties": {
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "message": {**text, "maxLength": 10240},
                "reason": {**text, "maxLength": 256},
                "severity": {"type": "string", "maxLength": 32},
                "status": {"type": "string"},
                "type": {**text, "maxLength": 256},
            },
        },
    }


def azure_machine_pool_machine() -> JsonObject:
    """``AzureMachinePoolMachine``'s v1beta1 ``openAPIV3Schema``."""
    string: JsonObject = {"type": "string"}
    spec = {
        "type": "object",
        "required": ["providerID"],
        "properties": {"instanceID": string, "providerID": string},
    }
    status = {
        "type": "object",
        "properties": {
            "conditions": _conditions(),
            "failureMessage": string,
            "failureReason": string,
            "instanceName": string,
            "latestModelApplied": {"type": "boolean"},
            "longRunningOperationStates": {
                "type": "array",
                "items": {"type": "object", **_OPEN},
            },
            "nodeRef": {"type": "object", **_OPEN, "x-kubernetes-map-type": "atomic"},
            "provisioningState": string,
            "ready": {"type": "boolean"},
            "version": string,
        },
    }
    return {"type": "object", "properties": {"spec": spec, "status": status}}
