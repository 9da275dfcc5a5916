"""CAPA's AWSMachine admission webhooks, so the simulator refuses what a real CAPA refuses.

The ``capa`` plugin writes AWSMachines (the one that makes CAPA adopt a fleet instance) from
a user's AWSMachineTemplate with fields of its own added. Over an open-schema CRD any such
object is stored, so a combination CAPA's webhook denies would only fail in a real cluster,
where the fleet instance then runs with no AWSMachine. This hook runs, for ``awsmachines`` in
``infrastructure.cluster.x-k8s.io`` at every served version (upstream's ``matchPolicy:
Equivalent``), the rules of cluster-api-provider-aws ``webhooks/awsmachine_webhook.go`` that
touch the fields the plugin copies or sets, with upstream's field paths and messages:

* ``Default`` (the mutating webhook): ``cloudInit.secureSecretsBackend: secrets-manager``
  unless ``insecureSkipSecretsManager`` or ``ignition`` is set; ignition's ``storageType``
  (``ClusterObjectStore``) and ``version`` (``2.3``, not for ``UnencryptedUserData``); and
  ``api/v1beta2/defaults.go: SetDefaults_AWSMachineSpec``'s instance metadata options.
* ``ValidateCreate``: ``validateCloudInitSecret``, ``validateIgnitionAndCloudInit`` (the
  ``BootstrapFormatIgnition`` gate counts as enabled: a cluster whose templates use ignition
  runs with it), ``validateRootVolume``, ``validateNonRootVolumes``,
  ``validateAdditionalSecurityGroups``, ``validateInstanceMarketType`` and
  ``validateCapacityReservation``.
* ``ValidateUpdate``: ``validateCloudInitSecret`` and ``validateAdditionalSecurityGroups``,
  then ``spec: Forbidden: cannot be modified`` for any change but ``providerID``,
  ``instanceID``, ``additionalTags``, ``additionalSecurityGroups`` and the cloudInit secret
  fields. Webhooks are registered for the resource, not its ``status`` subresource, so a
  write that leaves the spec alone is not judged again.

A denial is a 422 ``Invalid`` worded as kube-apiserver relays a webhook's answer:
``admission webhook "<name>" denied the request: AWSMachine.infrastructure.cluster.x-k8s.io
"<name>" is invalid: <causes>``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from karpenter_capi.core.kube.errors import Invalid
from karpenter_capi.sim.apiserver import messages
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.messages import FieldError
from karpenter_capi.sim.apiserver.write_hook import JsonObject, Previous, Warnings, WriteHook

GROUP: Final = "infrastructure.cluster.x-k8s.io"
VALIDATING: Final = "validation.awsmachine.infrastructure.cluster.x-k8s.io"
SECRETS_MANAGER: Final = "secrets-manager"
_PROVISIONED: Final = frozenset({"io1", "io2"})
_MUTABLE: Final = ("providerID", "instanceID", "additionalTags", "additionalSecurityGroups")
_SECRET_FIELDS: Final = ("secretPrefix", "secretCount", "secureSecretsBackend")
METADATA_DEFAULTS: Final[Mapping[str, Any]] = {
    "httpEndpoint": "enabled",
    "httpProtocolIpv6": "disabled",
    "httpPutResponseHopLimit": 1,
    "httpTokens": "optional",
    "instanceMetadataTags": "disabled",
}
"""``api/v1beta2/types.go: InstanceMetadataOptions.SetDefaults``."""


def default_spec(spec: Mapping[str, Any]) -> JsonObject:
    """``spec`` as CAPA's defaulting leaves it (a copy)."""
    result = copy.deepcopy(dict(spec))
    cloud_init = dict(result.get("cloudInit") or {})
    ignition = result.get("ignition")
    if (
        not cloud_init.get("insecureSkipSecretsManager")
        and not cloud_init.get("secureSecretsBackend")
        and ignition is None
    ):
        cloud_init["secureSecretsBackend"] = SECRETS_MANAGER
    if cloud_init or "cloudInit" in result:
        result["cloudInit"] = cloud_init
    if isinstance(ignition, Mapping):
        ignition = dict(ignition)
        ignition.setdefault("storageType", "ClusterObjectStore")
        if not ignition.get("version") and ignition["storageType"] != "UnencryptedUserData":
            ignition["version"] = "2.3"
        result["ignition"] = ignition
    result["instanceMetadataOptions"] = {
        **METADATA_DEFAULTS,
        **{k: v for k, v in dict(result.get("instanceMetadataOptions") or {}).items() if v},
    }
    return result


def _forbidden(path: str, detail: str) -> FieldError:
    return messages.forbidden_field(path, detail)


def _cloud_init_secret(spec: Mapping[str, Any]) -> list[FieldError]:
    cloud_init = spec.get("cloudInit") or {}
    errors: list[FieldError] = []
    why = "cannot be set if spec.cloudInit.insecureSkipSecretsManager is true"
    if cloud_init.get("insecureSkipSecretsManager"):
        errors.extend(
            _forbidden(f"spec.cloudInit.{name}", why)
            for name in ("secretPrefix", "secretCount", "secureSecretsBackend")
            if cloud_init.get(name)
        )
    if bool(cloud_init.get("secretPrefix")) != bool(cloud_init.get("secretCount")):
        errors.append(
            _forbidden(
                "spec.cloudInit.secretCount",
                "must be set together with spec.CloudInit.SecretPrefix",
            )
        )
    return errors


def _ignition_and_cloud_init(spec: Mapping[str, Any]) -> list[FieldError]:
    ignition = spec.get("ignition")
    if ignition is None:
        return []
    cloud_init = spec.get("cloudInit") or {}
    errors: list[FieldError] = []
    configured = any(
        cloud_init.get(name) for name in (*_SECRET_FIELDS, "insecureSkipSecretsManager")
    )
    if configured:
        errors.append(_forbidden("spec.cloudInit", "cannot be set if spec.ignition is set"))
    if isinstance(ignition, Mapping) and ignition.get("version") in ("2.3", "3.0"):
        why = "cannot be set if spec.ignition.version is 2.3 or 3.0"
        errors.extend(
            _forbidden(f"spec.ignition.{name}", why)
            for name in ("proxy", "tls")
            if ignition.get(name) is not None
        )
    return errors


def _volume(volume: Mapping[str, Any], path: str, *, root: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    kind = volume.get("type")
    if kind in _PROVISIONED and not volume.get("iops"):
        errors.append(messages.required(f"{path}.iops", "iops required if type is 'io1' or 'io2'"))
    throughput = volume.get("throughput")
    if throughput is not None:
        if kind != "gp3":
            errors.append(
                messages.required(f"{path}.throughput", "throughput is valid only for type 'gp3'")
            )
        if root and not 125 <= int(throughput) <= 2000:
            errors.append(
                messages.required(
                    "spec.awsLaunchTemplate.rootVolume.throughput",
                    "throughput must be between 125 Mib/s and 2000 MiB/s",
                )
            )
        if not root and int(throughput) < 0:
            errors.append(messages.required(f"{path}.throughput", "throughput must be nonnegative"))
    if not root and not volume.get("deviceName"):
        errors.append(
            messages.required(f"{path}.deviceName", "non root volume should have device name")
        )
    return errors


def _volumes(spec: Mapping[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    root = spec.get("rootVolume")
    if isinstance(root, Mapping):
        errors.extend(_volume(root, "spec.rootVolume", root=True))
    for volume in spec.get("nonRootVolumes") or []:
        if isinstance(volume, Mapping):
            errors.extend(_volume(volume, "spec.nonRootVolumes", root=False))
    return errors


def _security_groups(spec: Mapping[str, Any]) -> list[FieldError]:
    return [
        _forbidden(
            "spec.additionalSecurityGroups",
            "only one of ID or Filters may be specified, specifying both is forbidden",
        )
        for group in spec.get("additionalSecurityGroups") or []
        if isinstance(group, Mapping) and group.get("filters") and group.get("id") is not None
    ]


def _market(spec: Mapping[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    market = spec.get("marketType")
    spot = spec.get("spotMarketOptions") is not None
    reservation = spec.get("capacityReservationId")
    preference = spec.get("capacityReservationPreference") or ""
    if market == "CapacityBlock" and spot:
        errors.append(
            _forbidden(
                "spec.marketType",
                "marketType set to CapacityBlock and spotMarketOptions cannot be used together",
            )
        )
    if market == "OnDemand" and spot:
        errors.append(
            _forbidden(
                "spec.marketType",
                "setting marketType to OnDemand and spotMarketOptions cannot be used together",
            )
        )
    if market == "CapacityBlock" and reservation is None:
        errors.append(
            _forbidden("spec.capacityReservationID", "is required when CapacityBlock is provided")
        )
    only = "CapacityReservationsOnly"
    if reservation is not None and preference not in (only, ""):
        errors.append(
            _forbidden(
                "spec.capacityReservationPreference",
                "when capacityReservationId is specified, capacityReservationPreference may "
                "only be 'CapacityReservationsOnly' or empty",
            )
        )
    if preference == only and market == "Spot":
        errors.append(
            _forbidden(
                "spec.capacityReservationPreference",
                "when marketType is set to 'Spot', capacityReservationPreference cannot be set "
                "to 'CapacityReservationsOnly'",
            )
        )
    if preference == only and spot:
        errors.append(
            _forbidden(
                "spec.capacityReservationPreference",
                "when capacityReservationPreference is 'CapacityReservationsOnly', "
                "spotMarketOptions cannot be set (which implies marketType: 'Spot')",
            )
        )
    return errors


def validate_create(spec: Mapping[str, Any]) -> list[FieldError]:
    """``ValidateCreate``'s causes for a (defaulted) AWSMachine spec."""
    return [
        *_cloud_init_secret(spec),
        *_ignition_and_cloud_init(spec),
        *_volumes(spec),
        *_security_groups(spec),
        *_market(spec),
    ]


def _comparable(spec: Mapping[str, Any]) -> JsonObject:
    result = copy.deepcopy(dict(spec))
    for name in _MUTABLE:
        result.pop(name, None)
    cloud_init = result.get("cloudInit")
    if isinstance(cloud_init, dict):
        for name in _SECRET_FIELDS:
            cloud_init.pop(name, None)
    dns = result.get("privateDnsName")
    if isinstance(dns, dict):
        dns.pop("enableResourceNameDnsAAAARecord", None)
        dns.pop("enableResourceNameDnsARecord", None)
    return result


def validate_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldError]:
    """``ValidateUpdate``'s causes (``old`` and ``new`` are specs)."""
    errors = [*_cloud_init_secret(new), *_security_groups(new)]
    if _comparable(old) != _comparable(new):
        errors.append(_forbidden("spec", "cannot be modified"))
    return errors


def denied(definition: ResourceDefinition, name: str, errors: list[FieldError]) -> Invalid:
    """The error kube-apiserver answers when CAPA's validating webhook denies a write."""
    inner = messages.invalid(definition, name, errors)
    return Invalid(
        f'admission webhook "{VALIDATING}" denied the request: {inner.message}',
        details=inner.details,
    )


class CapaAwsMachineWebhooks(WriteHook):
    """CAPA's mutating and validating AWSMachine webhooks (see the module docstring)."""

    def admit(
        self, definition: ResourceDefinition, obj: JsonObject, old: Previous, warnings: Warnings
    ) -> JsonObject:
        if definition.group != GROUP or definition.plural != "awsmachines":
            return obj
        spec = obj.get("spec")
        if not isinstance(spec, Mapping):
            return obj
        if old is not None and old.get("spec") == spec:
            return obj  # a status or metadata write: the webhooks judged this spec already
        name = str((obj.get("metadata") or {}).get("name") or "")
        defaulted = default_spec(spec)
        if old is None:
            errors = validate_create(defaulted)
        else:
            errors = validate_update(dict(old.get("spec") or {}), defaulted)
        if errors:
            raise denied(definition, name, errors)
        return {**obj, "spec": defaulted}
