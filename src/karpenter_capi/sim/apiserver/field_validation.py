"""``fieldValidation``: what the server does with fields it would drop (Ignore, Warn, Strict).

kubectl and client-go send ``fieldValidation=Strict`` (or Warn) so a typo in a manifest is an
error rather than a silently dropped field; the in-process default, Ignore, drops them as the
server always has. The create, update and patch verbs check the directive and the body here
before the write.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.kube.errors import BadRequest, Invalid
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.engine import Engine

JsonObject = dict[str, Any]

FIELD_VALIDATION_DIRECTIVES = ("Ignore", "Strict", "Warn")


def check_directive(directive: str | None, options_kind: str) -> None:
    """An unknown ``fieldValidation`` is 422 on the request's options, as kube answers it."""
    if directive in (None, "") or directive in FIELD_VALIDATION_DIRECTIVES:
        return
    supported = ", ".join(f'"{d}"' for d in FIELD_VALIDATION_DIRECTIVES)
    detail = f'Unsupported value: "{directive}": supported values: {supported}'
    raise Invalid(
        f'{options_kind}.meta.k8s.io "" is invalid: fieldValidation: {detail}',
        details={
            "group": "meta.k8s.io",
            "kind": options_kind,
            "causes": [
                {"reason": "FieldValueNotSupported", "message": detail, "field": "fieldValidation"}
            ],
        },
    )


def check_fields(
    engine: Engine,
    definition: ResourceDefinition,
    resource: Resource | None,
    body: JsonObject,
    *,
    directive: str | None,
    warnings: list[str] | None,
) -> None:
    """``fieldValidation``: Strict refuses unknown fields (400), Warn reports them.

    Unknown means what the server would drop: fields outside a custom resource's schema
    (unless it preserves unknown fields) and keys ObjectMeta does not have. Ignore, the
    in-process default, drops them silently. ``resource`` is None for a patch, whose
    message kube words without the kind.
    """
    if directive in (None, "", "Ignore"):
        return
    unknown = engine.unknown_fields(definition, body)
    if not unknown:
        return
    found = [f'unknown field "{path}"' for path in unknown]
    if directive == "Warn":
        if warnings is not None:
            warnings.extend(found)
        return
    error = "strict decoding error: " + ", ".join(found)
    if resource is not None:
        kind = definition.kind
        error = f'{kind} in version "{resource.version}" cannot be handled as a {kind}: {error}'
    raise BadRequest(error)
