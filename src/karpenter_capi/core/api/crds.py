"""CustomResourceDefinitions generated from the pydantic models.

The CRDs are derived, never hand-kept (docs/design.md, decision 1, "Karpenter's API, Cluster API's
machines"): the model is the single source of truth for field names, enums, patterns, bounds and
defaults, and this module translates its JSON schema into what the API server demands, a
*structural* OpenAPI v3 schema:

- every ``$ref`` is inlined (the API server has no ``$defs``);
- ``Optional[X]`` (``anyOf: [X, null]``) becomes plain ``X``: optional fields are simply left
  out, since the models never emit ``null``;
- pydantic's Python-side defaults are dropped; only the defaults upstream Karpenter declares
  (tagged ``x-crd-default`` on the field) become ``default``, so the API server fills in exactly
  what Karpenter's would;
- maps become ``type: object`` + ``additionalProperties``, quantities
  ``x-kubernetes-int-or-string``, ``const`` an ``enum``; titles are dropped.

Names, scope, categories, short names and printer columns follow upstream Karpenter v1 and the
Cluster API provider so ``kubectl get nodepools,nodeclaims`` looks the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool

_DROPPED_KEYS = frozenset({"title", "default", "examples", "discriminator"})
# Keys whose values are schemas in turn, made structural one by one.
_NESTED_KEYS = frozenset({"properties", "items", "additionalProperties"})
_TYPE_META = {
    "apiVersion": {
        "description": "APIVersion defines the versioned schema of this representation of an "
        "object.",
        "type": "string",
    },
    "kind": {
        "description": "Kind is a string value representing the REST resource this object "
        "represents.",
        "type": "string",
    },
    "metadata": {"type": "object"},
}


@dataclass(frozen=True)
class CrdSpec:
    """Everything about a CRD that is not in the model's schema."""

    model: type[BaseModel]
    group: str
    version: str
    kind: str
    plural: str
    scope: str = "Cluster"
    categories: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    printer_columns: tuple[dict[str, Any], ...] = field(default=())
    scale: dict[str, str] | None = None

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def file_name(self) -> str:
        return f"{self.group}_{self.plural}.yaml"


def _column(
    name: str, json_path: str, type_: str = "string", *, wide: bool = False
) -> dict[str, Any]:
    column: dict[str, Any] = {"jsonPath": json_path, "name": name, "type": type_}
    if wide:
        column["priority"] = 1
    return column


_READY = '.status.conditions[?(@.type=="Ready")].status'
_AGE = _column("Age", ".metadata.creationTimestamp", "date")

CRD_SPECS: tuple[CrdSpec, ...] = (
    CrdSpec(
        model=NodePool,
        group=wellknown.KARPENTER_GROUP,
        version=wellknown.KARPENTER_VERSION,
        kind="NodePool",
        plural="nodepools",
        categories=("karpenter",),
        # Static NodePools scale like a Deployment (``kubectl scale nodepool``), as upstream's.
        scale={"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"},
        printer_columns=(
            _column("NodeClass", ".spec.template.spec.nodeClassRef.name"),
            _column("Nodes", ".status.nodes"),
            _column("Ready", _READY),
            _AGE,
            _column("Weight", ".spec.weight", "integer", wide=True),
            _column("CPU", ".status.resources.cpu", wide=True),
            _column("Memory", ".status.resources.memory", wide=True),
        ),
    ),
    CrdSpec(
        model=NodeClaim,
        group=wellknown.KARPENTER_GROUP,
        version=wellknown.KARPENTER_VERSION,
        kind="NodeClaim",
        plural="nodeclaims",
        categories=("karpenter",),
        printer_columns=(
            _column("Type", ".metadata.labels.node\\.kubernetes\\.io/instance-type"),
            _column("Capacity", ".metadata.labels.karpenter\\.sh/capacity-type"),
            _column("Zone", ".metadata.labels.topology\\.kubernetes\\.io/zone"),
            _column("Node", ".status.nodeName"),
            _column("Ready", _READY),
            _AGE,
            _column("ImageID", ".status.imageID", wide=True),
            _column("ID", ".status.providerID", wide=True),
            _column("NodePool", ".metadata.labels.karpenter\\.sh/nodepool", wide=True),
            _column("NodeClass", ".spec.nodeClassRef.name", wide=True),
            _column("Drifted", '.status.conditions[?(@.type=="Drifted")].status', wide=True),
        ),
    ),
    CrdSpec(
        model=ClusterAPINodeClass,
        group=wellknown.NODECLASS_GROUP,
        version=wellknown.NODECLASS_VERSION,
        kind=wellknown.NODECLASS_KIND,
        plural="clusterapinodeclasses",
        categories=("karpenter",),
        short_names=("capinc", "capincs"),
        printer_columns=(_column("Ready", _READY), _AGE),
    ),
)


class _NoAliasDumper(yaml.SafeDumper):
    """Writes shared sub-schemas out in full: kubectl users read CRDs, and anchors confuse."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class SchemaConversionError(ValueError):
    """The model's JSON schema uses a construct a structural schema cannot express."""


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline ``$ref`` (and single-member ``allOf``), sibling keys overriding the target's."""
    while "$ref" in node or ("allOf" in node and len(node["allOf"]) == 1):
        node = dict(node)
        if "$ref" in node:
            name = node.pop("$ref").rsplit("/", 1)[-1]
            target = defs[name]
        else:
            target = node.pop("allOf")[0]
        node = {**target, **node}
    return node


def _structural(raw: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    node = _resolve(raw, defs)
    if "anyOf" in node:
        node = _without_union(node, defs, path)
        if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
            return _structural(node, defs, path)
    out = _structural_keys(node, defs, path)
    if "properties" in out:
        out["type"] = "object"
        out.pop("additionalProperties", None)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "type" not in out and not out.get("x-kubernetes-int-or-string"):
        raise SchemaConversionError(f"{path}: schema has no type: {raw!r}")
    return out


def _without_union(node: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    """Fold pydantic's ``anyOf``: a structural schema allows only Optional and int-or-string.

    ``Optional[X]`` becomes ``X`` (kube has no null type; absence says it); an int-or-string
    keeps its ``anyOf`` under the extension; any other union cannot be served, so it raises.
    """
    options = [o for o in node["anyOf"] if _resolve(o, defs).get("type") != "null"]
    node = {k: v for k, v in node.items() if k != "anyOf"}
    if len(options) == 1:
        node = {**_resolve(options[0], defs), **node}
    elif node.get("x-kubernetes-int-or-string"):
        node["anyOf"] = options
    else:
        raise SchemaConversionError(f"{path}: unions other than Optional/int-or-string")
    return _resolve(node, defs)


def _structural_keys(node: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    """Each key of a resolved node in its CRD form, recursing into nested schemas.

    Pydantic-only keys drop, ``const`` and the default extension become what kube reads.
    """
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key in _NESTED_KEYS:
            out.update(_structural_nested(key, value, defs, path))
        elif key == "x-crd-default":
            out["default"] = value
        elif key == "const":
            out["enum"] = [value]
        elif key == "required":
            if value:
                out["required"] = sorted(value)
        else:
            out[key] = value
    return out


def _structural_nested(key: str, value: Any, defs: dict[str, Any], path: str) -> dict[str, Any]:
    """A key holding nested schemas, each made structural; a boolean additionalProperties
    drops (a structural schema allows only a schema there)."""
    if key == "properties":
        return {
            "properties": {
                name: _structural(sub, defs, f"{path}.{name}") for name, sub in value.items()
            }
        }
    if key == "items":
        return {"items": _structural(value, defs, f"{path}[]")}
    if isinstance(value, dict):
        return {"additionalProperties": _structural(value, defs, f"{path}{{}}")}
    return {}


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural ``openAPIV3Schema`` of a top-level API model."""
    raw = model.model_json_schema(mode="validation", by_alias=True)
    defs = raw.pop("$defs", {})
    schema = _structural(raw, defs, model.__name__)
    schema["properties"].update(_TYPE_META)
    required = [name for name in schema.get("required", []) if name not in {"apiVersion", "kind"}]
    if required:
        schema["required"] = required
    else:
        schema.pop("required", None)
    return schema


def _crd(spec: CrdSpec) -> dict[str, Any]:
    names: dict[str, Any] = {
        "kind": spec.kind,
        "listKind": f"{spec.kind}List",
        "plural": spec.plural,
        "singular": spec.kind.lower(),
    }
    if spec.categories:
        names["categories"] = list(spec.categories)
    if spec.short_names:
        names["shortNames"] = list(spec.short_names)
    version: dict[str, Any] = {
        "name": spec.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": openapi_schema(spec.model)},
        "subresources": {"status": {}, **({"scale": dict(spec.scale)} if spec.scale else {})},
    }
    if spec.printer_columns:
        version["additionalPrinterColumns"] = [dict(c) for c in spec.printer_columns]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": spec.name},
        "spec": {
            "group": spec.group,
            "names": names,
            "scope": spec.scope,
            "versions": [version],
        },
    }


def generate_crds() -> list[dict[str, Any]]:
    """Every CRD this project serves, ordered by CRD name."""
    return [_crd(spec) for spec in sorted(CRD_SPECS, key=lambda s: s.name)]


def _dump(crd: dict[str, Any]) -> str:
    return "---\n" + yaml.dump(
        crd, Dumper=_NoAliasDumper, sort_keys=True, default_flow_style=False, width=100
    )


def crds_yaml() -> str:
    """All CRDs as one multi-document YAML stream."""
    return "".join(_dump(crd) for crd in generate_crds())


def crd_files() -> dict[str, str]:
    """File name (``<group>_<plural>.yaml``) to YAML text, for every CRD."""
    by_name = {spec.name: spec.file_name for spec in CRD_SPECS}
    return {by_name[crd["metadata"]["name"]]: _dump(crd) for crd in generate_crds()}


def write_crds(directory: Path) -> list[Path]:
    """Write one file per CRD into ``directory`` (created if missing); return the paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name, text in crd_files().items():
        path = directory / file_name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
