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
  ``validateAdditionalSecurityGroups``, ``api/v1beta2/tags.go: Tags.Validate`` (the
  ``additionalTags`` the plugin adds: at most 50, keys 1-128 and values up to 256 characters
  of letters, digits, spaces and ``_ . : / = + - @``, no ``aws:`` prefix),
  ``validateNetworkElasticIPPool``, ``validateInstanceMarketType``,
  ``validateCapacityReservation`` and ``validateHostAllocation`` (``hostID`` and
  ``dynamicHostAllocation`` exclusive, both and ``hostAffinity: host`` only with ``tenancy:
  host``).
* ``ValidateUpdate``: ``validateCloudInitSecret``, ``validateAdditionalSecurityGroups``,
  ``Tags.Validate`` and ``validateHostAllocationUpdate``, then ``spec: Forbidden: cannot be
  modified`` for any change but ``providerID``, ``instanceID``, ``additionalTags``,
  ``additionalSecurityGroups`` and the cloudInit secret fields. Webhooks are registered for
  the resource, not its ``status`` subresource, so a write that leaves the spec alone is not
  judged again.

A denial is a 422 ``Invalid`` worded as kube-apiserver relays a webhook's answer:
``admission webhook "<name>" denied the request: AWSMachine.infrastructure.cluster.x-k8s.io
"<name>" is invalid: <causes>``.
"""

from __future__ import annotations

import copy
import re
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
_MAX_TAGS: Final = 50
# Go's \s is ASCII whitespace only: spelled out, where Python's would take any Unicode space.
_TAG_CHARACTERS: Final = re.compile(r"[a-zA-Z0-9\t\n\f\r _.:=+\-@/]*")
_IPV4_POOL_PREFIX: Final = "ipv4pool-ec2-"
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


def _tags(spec: Mapping[str, Any]) -> list[FieldError]:
    """``api/v1beta2/tags.go: Tags.Validate`` (keys in order, where upstream's map has none)."""
    tags = spec.get("additionalTags")
    if not isinstance(tags, Mapping):
        return []
    path = "spec.additionalTags"
    errors: list[FieldError] = []
    for key in sorted(tags):
        value = str(tags[key])
        if not key:
            errors.append(messages.invalid_value(path, key, "key cannot be empty"))
        if len(key) > 128:
            errors.append(
                messages.invalid_value(path, key, "key cannot be longer than 128 characters")
            )
        if len(value) > 256:
            errors.append(
                messages.invalid_value(path, value, "value cannot be longer than 256 characters")
            )
        if key.startswith("aws:"):
            errors.append(
                messages.invalid_value(path, key, "user created tag's key cannot have prefix aws:")
            )
        for what, text in (("key", key), ("value", value)):
            if _TAG_CHARACTERS.fullmatch(text) is None:
                errors.append(
                    messages.invalid_value(
                        path,
                        text,
                        f"{what} cannot have characters other than alphabets, numbers, spaces "
                        "and _ . : / = + - @ .",
                    )
                )
    if len(tags) > _MAX_TAGS:
        errors.append(
            messages.invalid_value(path, dict(tags), "user created tags cannot be more than 50")
        )
    return errors


def _elastic_ip_pool(spec: Mapping[str, Any]) -> list[FieldError]:
    """``validateNetworkElasticIPPool``."""
    pool = spec.get("elasticIpPool")
    if not isinstance(pool, Mapping):
        return []
    errors: list[FieldError] = []
    if spec.get("publicIP") is not True:
        errors.append(
            messages.required(
                "spec.elasticIpPool",
                "publicIp must be set to 'true' to assign custom public IPv4 pools with "
                "elasticIpPool",
            )
        )
    name, fallback = pool.get("publicIpv4Pool"), pool.get("publicIpv4PoolFallbackOrder")
    if name is not None:
        if fallback is None:
            errors.append(
                messages.invalid_value(
                    "spec.elasticIpPool.publicIpv4PoolFallbackOrder",
                    dict(pool),
                    "publicIpv4PoolFallbackOrder must be set when publicIpv4Pool is defined.",
                )
            )
        if not str(name).startswith(_IPV4_POOL_PREFIX):
            errors.append(
                messages.invalid_value(
                    "spec.elasticIpPool.publicIpv4Pool",
                    dict(pool),
                    f"publicIpv4Pool must start with {_IPV4_POOL_PREFIX}.",
                )
            )
    elif fallback is not None:
        errors.append(
            messages.invalid_value(
                "spec.elasticIpPool.publicIpv4PoolFallbackOrder",
                dict(pool),
                "publicIpv4Pool must be set when publicIpv4PoolFallbackOrder is defined.",
            )
        )
    return errors


def _host_allocation(spec: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
    """``validateHostAllocation`` (``old`` None) and ``validateHostAllocationUpdate``, which
    lets an object keep the ``hostAffinity: host`` without ``tenancy: host`` it already had."""
    host_id = bool(spec.get("hostID"))
    dynamic = spec.get("dynamicHostAllocation") is not None
    on_host = spec.get("tenancy") == "host"
    errors: list[FieldError] = []
    if host_id and dynamic:
        why = "hostID and dynamicHostAllocation are mutually exclusive"
        errors.append(_forbidden("spec.hostID", why))
        errors.append(_forbidden("spec.dynamicHostAllocation", why))
    if host_id and not on_host:
        errors.append(_forbidden("spec.hostID", "hostID can only be set when tenancy is 'host'"))
    pinned = spec.get("hostAffinity") == "host"
    inherited = (
        old is not None and old.get("hostAffinity") == "host" and old.get("tenancy") != "host"
    )
    if pinned and not on_host and not inherited:
        errors.append(
            _forbidden(
                "spec.hostAffinity", "hostAffinity can only be set to 'host' when tenancy is 'host'"
            )
        )
    if dynamic and not on_host:
        errors.append(
            _forbidden(
                "spec.dynamicHostAllocation",
                "dynamicHostAllocation can only be set when tenancy is 'host'",
            )
        )
    if dynamic and not pinned:
        errors.append(
            _forbidden(
                "spec.dynamicHostAllocation",
                "dynamicHostAllocation can only be set when hostAffinity is 'host'",
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
        *_tags(spec),
        *_elastic_ip_pool(spec),
        *_market(spec),
        *_host_allocation(spec, None),
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
    errors = [
        *_cloud_init_secret(new),
        *_security_groups(new),
        *_tags(new),
        *_host_allocation(new, old),
    ]
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
