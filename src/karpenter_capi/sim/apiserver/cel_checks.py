"""What kube-apiserver refuses in a CRD's validation rules when the CRD is written.

A rule that cannot compile, or can never apply, is a mistake in the CRD, and kube reports it
to whoever writes the CRD (422 on the CustomResourceDefinition) rather than to every later
writer of its objects. The in-memory server does the same, with these checks.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.sim.apiserver.cel import (
    REASONS,
    CompileError,
    compile_expression,
    uses_old_self,
)
from karpenter_capi.sim.apiserver.cel_paths import normalize_field_path
from karpenter_capi.sim.apiserver.correlate import list_type
from karpenter_capi.sim.apiserver.messages import FieldError, invalid_value, required

JsonObject = dict[str, Any]


def schema_rule_errors(schema: JsonObject, path: str) -> list[FieldError]:
    """What kube refuses in a CRD's rules: rules CEL cannot compile, an unknown ``reason``,
    a ``fieldPath`` naming no field, transition rules where nothing correlates (below a list
    that is not ``x-kubernetes-list-type: map``), ``optionalOldSelf`` without ``oldSelf``.

    ``path`` is the schema's own field path in the CRD (``spec.versions[0].schema...``).
    """
    errors: list[FieldError] = []
    _check_schema(schema, path, None, errors)
    return errors


def _check_schema(
    schema: JsonObject, path: str, uncorrelatable: str | None, errors: list[FieldError]
) -> None:
    for index, raw in enumerate(schema.get("x-kubernetes-validations") or []):
        if isinstance(raw, dict):
            errors.extend(
                _check_rule(
                    raw, schema, f"{path}.x-kubernetes-validations[{index}]", uncorrelatable
                )
            )
    for name, child in (schema.get("properties") or {}).items():
        if isinstance(child, dict):
            _check_schema(child, f"{path}.properties[{name}]", uncorrelatable, errors)
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        _check_schema(additional, f"{path}.additionalProperties", uncorrelatable, errors)
    items = schema.get("items")
    if isinstance(items, dict):
        where = f"{path}.items"
        below = uncorrelatable
        if below is None and list_type(schema) != "map":
            below = where
        _check_schema(items, where, below, errors)
    for index, branch in enumerate(schema.get("allOf") or []):
        if isinstance(branch, dict):
            _check_schema(branch, f"{path}.allOf[{index}]", uncorrelatable, errors)


def _check_rule(
    raw: JsonObject, schema: JsonObject, path: str, uncorrelatable: str | None
) -> list[FieldError]:
    return [
        *_rule_errors(raw, path, uncorrelatable),
        *_message_errors(raw, path),
        *_reason_and_field_path_errors(raw, schema, path),
    ]


def _rule_errors(raw: JsonObject, path: str, uncorrelatable: str | None) -> list[FieldError]:
    """The rule compiles, and uses oldSelf only where the schema correlates old and new."""
    errors: list[FieldError] = []
    text = str(raw.get("rule") or "")
    old_self = False
    if not text.strip():
        errors.append(required(f"{path}.rule", "rule is not specified"))
    else:
        try:
            compile_expression(text)
            old_self = uses_old_self(text)
        except CompileError as error:
            errors.append(invalid_value(f"{path}.rule", text, f"compilation failed: {error}"))
    if old_self and uncorrelatable is not None:
        errors.append(
            invalid_value(
                f"{path}.rule",
                text,
                f"oldSelf cannot be used on the uncorrelatable portion of the schema within "
                f"{uncorrelatable}",
            )
        )
    if "optionalOldSelf" in raw and text.strip() and not old_self:
        errors.append(
            invalid_value(
                f"{path}.optionalOldSelf",
                raw["optionalOldSelf"],
                "may not be set if oldSelf is not used in rule",
            )
        )
    return errors


def _message_errors(raw: JsonObject, path: str) -> list[FieldError]:
    """The message is one line, the messageExpression compiles."""
    errors: list[FieldError] = []
    message = raw.get("message")
    if isinstance(message, str) and "\n" in message.strip():
        errors.append(
            invalid_value(f"{path}.message", message, "message must not contain line breaks")
        )
    expression = str(raw.get("messageExpression") or "")
    if expression.strip():
        try:
            compile_expression(expression)
        except CompileError as error:
            errors.append(
                invalid_value(
                    f"{path}.messageExpression",
                    expression,
                    f"messageExpression compilation failed: {error}",
                )
            )
    return errors


def _reason_and_field_path_errors(
    raw: JsonObject, schema: JsonObject, path: str
) -> list[FieldError]:
    """The reason is one kube knows, the fieldPath a path of the schema."""
    errors: list[FieldError] = []
    reason = raw.get("reason")
    if reason is not None and reason not in REASONS:
        supported = ", ".join(f'"{r}"' for r in REASONS)
        errors.append(
            FieldError(
                f"{path}.reason",
                "FieldValueNotSupported",
                f'Unsupported value: "{reason}": supported values: {supported}',
            )
        )
    field_path = raw.get("fieldPath")
    if field_path:
        try:
            normalize_field_path(str(field_path), schema)
        except ValueError:
            errors.append(
                invalid_value(f"{path}.fieldPath", field_path, "fieldPath must be a valid path")
            )
    return errors
