"""The errors the in-memory API server raises, worded and detailed as kube-apiserver words them.

Controllers and kubectl users read these messages (``pods "web-1" not found``, ``Operation
cannot be fulfilled on ...``), and clients branch on ``details`` (name, group, kind, causes), so
they are built in one place from the same templates kube's ``apimachinery/pkg/api/errors`` uses.
Name validation lives here too because its only output is an ``Invalid`` error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from karpenter_capi.core.kube.errors import AlreadyExists, Conflict, Forbidden, Invalid, NotFound
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_HELP = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_HELP = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
# Kinds whose names must be DNS-1123 labels rather than subdomains.
_LABEL_NAMED = frozenset({"namespaces", "services"})


@dataclass(frozen=True, slots=True)
class FieldError:
    """One ``details.causes`` entry: ``reason`` is kube's ``FieldValue*`` cause type."""

    field: str
    reason: str
    detail: str

    @property
    def message(self) -> str:
        return self.detail

    def render(self) -> str:
        return f"{self.field}: {self.detail}"


def _details(definition: ResourceDefinition, name: str) -> dict[str, Any]:
    return {"name": name, "group": definition.group, "kind": definition.plural}


def not_found(definition: ResourceDefinition, name: str) -> NotFound:
    return NotFound(
        f'{definition.group_resource} "{name}" not found', details=_details(definition, name)
    )


def namespace_not_found(namespace: str) -> NotFound:
    return NotFound(
        f'namespaces "{namespace}" not found',
        details={"name": namespace, "group": "", "kind": "namespaces"},
    )


def already_exists(definition: ResourceDefinition, name: str) -> AlreadyExists:
    return AlreadyExists(
        f'{definition.group_resource} "{name}" already exists',
        details=_details(definition, name),
    )


def conflict(definition: ResourceDefinition, name: str, why: str | None = None) -> Conflict:
    reason = why or (
        "the object has been modified; please apply your changes to the latest version and "
        "try again"
    )
    return Conflict(
        f'Operation cannot be fulfilled on {definition.group_resource} "{name}": {reason}',
        details=_details(definition, name),
    )


def forbidden(definition: ResourceDefinition, name: str, why: str) -> Forbidden:
    return Forbidden(
        f'{definition.group_resource} "{name}" is forbidden: {why}',
        details=_details(definition, name),
    )


def webhook_denied(webhook: str, message: str) -> Forbidden:
    """A validating admission webhook's refusal, as kube-apiserver words it (403; the webhook
    answered a plain error, which controller-runtime sends as Forbidden)."""
    return Forbidden(f'admission webhook "{webhook}" denied the request: {message}')


def qualified_kind(definition: ResourceDefinition) -> str:
    """``Pod``, ``Deployment.apps``: how kube names a kind in ``is invalid`` messages."""
    return f"{definition.kind}.{definition.group}" if definition.group else definition.kind


def invalid(
    definition: ResourceDefinition, name: str, errors: list[FieldError], *, kind: str | None = None
) -> Invalid:
    rendered = [error.render() for error in errors]
    summary = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    shown_kind = kind or qualified_kind(definition)
    return Invalid(
        f'{shown_kind} "{name}" is invalid: {summary}',
        details={
            "name": name,
            "group": definition.group,
            "kind": definition.kind,
            "causes": [
                {"reason": e.reason, "message": e.message, "field": e.field} for e in errors
            ],
        },
    )


def required(field: str, detail: str) -> FieldError:
    # As kube's field.Error: the detail only when there is one ("spec.x: Required value").
    return FieldError(
        field, "FieldValueRequired", f"Required value: {detail}" if detail else "Required value"
    )


def invalid_value(field: str, value: Any, detail: str) -> FieldError:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    return FieldError(field, "FieldValueInvalid", f"Invalid value: {shown}: {detail}")


def forbidden_field(field: str, detail: str) -> FieldError:
    return FieldError(field, "FieldValueForbidden", f"Forbidden: {detail}")


def validate_name(definition: ResourceDefinition, name: str) -> list[FieldError]:
    """kube's name validation: DNS-1123 subdomain (labels for namespaces and services)."""
    if not name:
        return [required("metadata.name", "name or generateName is required")]
    if definition.plural in _LABEL_NAMED:
        if len(name) > 63 or not _DNS1123_LABEL.match(name):
            return [invalid_value("metadata.name", name, _LABEL_HELP)]
        return []
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        return [invalid_value("metadata.name", name, _SUBDOMAIN_HELP)]
    return []


_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NAME_PART_HELP = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_LABEL_VALUE_HELP = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
_ANNOTATIONS_LIMIT = 256 * 1024


def _qualified_name_errors(field: str, key: str) -> list[FieldError]:
    prefix, slash, name = key.rpartition("/")
    errors: list[FieldError] = []
    if slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        errors.append(invalid_value(field, key, f"prefix part {_SUBDOMAIN_HELP}"))
    if not name:
        errors.append(invalid_value(field, key, "name part must be non-empty"))
    elif len(name) > 63:
        errors.append(invalid_value(field, key, "name part must be no more than 63 characters"))
    elif not _QUALIFIED_NAME.match(name):
        errors.append(invalid_value(field, key, _NAME_PART_HELP))
    return errors


def validate_metadata(meta: dict[str, Any]) -> list[FieldError]:
    """Labels, annotation keys and owner references, checked as kube's ObjectMeta validation."""
    errors: list[FieldError] = []
    for key, value in (meta.get("labels") or {}).items():
        errors.extend(_qualified_name_errors("metadata.labels", str(key)))
        text = str(value) if value is not None else ""
        if len(text) > 63:
            errors.append(
                invalid_value("metadata.labels", text, "must be no more than 63 characters")
            )
        elif not _LABEL_VALUE.match(text):
            errors.append(invalid_value("metadata.labels", text, _LABEL_VALUE_HELP))
    annotations = meta.get("annotations") or {}
    for key in annotations:
        errors.extend(_qualified_name_errors("metadata.annotations", str(key).lower()))
    size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
    if size > _ANNOTATIONS_LIMIT:
        errors.append(
            FieldError(
                "metadata.annotations",
                "FieldValueTooLong",
                f"Too long: must have at most {_ANNOTATIONS_LIMIT} bytes",
            )
        )
    for index, ref in enumerate(meta.get("ownerReferences") or []):
        where = f"metadata.ownerReferences[{index}]"
        for part in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(part):
                errors.append(invalid_value(f"{where}.{part}", "", f"{part} must not be empty"))
    return errors
