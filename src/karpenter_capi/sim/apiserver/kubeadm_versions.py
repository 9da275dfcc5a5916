"""Cluster API's kubeadm bootstrap kinds at v1beta1 and v1beta2: a schema per version and the
conversion webhook between them.

A real management cluster validates a ``KubeadmConfig`` against the schema of the version it is
written at and converts it (CAPI's conversion webhook) to the storage version, v1beta2; a read
at v1beta1 converts back. The field where the two versions differ in a way the autoprovisioner
meets is ``nodeRegistration.kubeletExtraArgs``: a map in v1beta1, a list of ``{name, value}``
in v1beta2. Writing a spec copied from a v1beta2 read at v1beta1 is refused by the schema, which
is the mistake this module exists to catch. The schemas describe the fields the plugins and the
emulation write or read (``joinConfiguration``/``initConfiguration`` ``nodeRegistration``:
``kubeletExtraArgs``, ``taints``, ``name``) and keep the rest as unknown fields; the conversion
maps only ``kubeletExtraArgs`` (everything else is carried as is).

Upstream: cluster-api
bootstrap/kubeadm/config/crd/bases/bootstrap.cluster.x-k8s.io_kubeadmconfigs.yaml (the two
schemas), api/bootstrap/kubeadm/v1beta2/conversion.go: ``ConvertToArgs`` (map to list,
sorted by name then value) and ``ConvertFromArgs`` (list to map, a repeated name keeps the last
value), used by api/bootstrap/kubeadm/v1beta1/conversion.go:
``Convert_v1beta1_NodeRegistrationOptions_To_v1beta2_NodeRegistrationOptions`` and back.
"""

from __future__ import annotations

from typing import Any, Final

from karpenter_capi.sim.apiserver.objects import copy_json

JsonObject = dict[str, Any]

GROUP: Final = "bootstrap.cluster.x-k8s.io"
WEBHOOK_SERVICE: Final = ("capi-kubeadm-bootstrap-system", "capi-kubeadm-bootstrap-webhook-service")

_OPEN: Final[JsonObject] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_TAINTS: Final[JsonObject] = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["effect", "key"],
        "properties": {
            "key": {"type": "string"},
            "value": {"type": "string"},
            "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
        },
        "x-kubernetes-preserve-unknown-fields": True,
    },
}
_ARGS_V1BETA1: Final[JsonObject] = {"type": "object", "additionalProperties": {"type": "string"}}
_ARGS_V1BETA2: Final[JsonObject] = {
    "type": "array",
    "minItems": 1,
    "maxItems": 100,
    "items": {
        "type": "object",
        "required": ["name", "value"],
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 256},
            "value": {"type": "string", "maxLength": 1024},
        },
    },
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["name", "value"],
    "x-kubernetes-validations": [
        {
            "rule": "self.all(x, self.exists_one(y, x.name == y.name))",
            "message": "kubeletExtraArgs name must be unique",
        }
    ],
}
_SECTIONS: Final = ("initConfiguration", "joinConfiguration")


def _config_spec(args: JsonObject) -> JsonObject:
    registration = {
        "type": "object",
        "properties": {
            "kubeletExtraArgs": args,
            "taints": _TAINTS,
            "name": {"type": "string", "minLength": 1, "maxLength": 253},
        },
        "x-kubernetes-preserve-unknown-fields": True,
    }
    section = {
        "type": "object",
        "properties": {"nodeRegistration": registration},
        "x-kubernetes-preserve-unknown-fields": True,
    }
    return {
        "type": "object",
        "properties": dict.fromkeys(_SECTIONS, section),
        "x-kubernetes-preserve-unknown-fields": True,
    }


def _root(spec: JsonObject) -> JsonObject:
    return {"type": "object", "properties": {"spec": spec, "status": _OPEN}}


def config_schemas() -> dict[str, JsonObject]:
    """``KubeadmConfig``'s ``openAPIV3Schema`` by version."""
    return {
        "v1beta2": _root(_config_spec(_ARGS_V1BETA2)),
        "v1beta1": _root(_config_spec(_ARGS_V1BETA1)),
    }


def template_schemas() -> dict[str, JsonObject]:
    """``KubeadmConfigTemplate``'s: the config's spec under ``spec.template.spec``."""

    def wrap(spec: JsonObject) -> JsonObject:
        template = {
            "type": "object",
            "properties": {"metadata": _OPEN, "spec": spec},
        }
        return _root({"type": "object", "properties": {"template": template}})

    return {
        "v1beta2": wrap(_config_spec(_ARGS_V1BETA2)),
        "v1beta1": wrap(_config_spec(_ARGS_V1BETA1)),
    }


def _to_list(args: Any) -> Any:
    if not isinstance(args, dict):
        return args  # not v1beta1's shape: left for the schema to refuse
    return [{"name": k, "value": v} for k, v in sorted(args.items(), key=lambda kv: kv)]


def _to_map(args: Any) -> Any:
    if not isinstance(args, list):
        return args
    found: dict[str, Any] = {}
    for arg in args:
        if isinstance(arg, dict) and "name" in arg:
            found[str(arg["name"])] = arg.get("value", "")
    return found


def convert(obj: JsonObject, api_version: str) -> JsonObject:
    """``obj`` (a private copy, changed in place) converted to ``api_version``, as CAPI's
    conversion webhook answers a ``ConversionReview``."""
    source = str(obj.get("apiVersion") or "").rpartition("/")[2]
    target = api_version.rpartition("/")[2]
    obj["apiVersion"] = api_version
    if source == target or {source, target} != {"v1beta1", "v1beta2"}:
        return obj
    spec = obj.get("spec")
    if obj.get("kind") == "KubeadmConfigTemplate" and isinstance(spec, dict):
        spec = (spec.get("template") or {}).get("spec")
    if not isinstance(spec, dict):
        return obj
    change = _to_list if target == "v1beta2" else _to_map
    for section in _SECTIONS:
        registration = (spec.get(section) or {}).get("nodeRegistration")
        if not isinstance(registration, dict) or "kubeletExtraArgs" not in registration:
            continue
        converted = change(copy_json(registration["kubeletExtraArgs"]))
        if converted in ({}, []):
            del registration["kubeletExtraArgs"]  # omitempty: an empty map or list is no field
        else:
            registration["kubeletExtraArgs"] = converted
    return obj
