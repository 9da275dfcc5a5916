"""CRD validation rules (``x-kubernetes-validations``), evaluated the way kube-apiserver does.

Karpenter's CRDs carry CEL rules a real API server enforces on every write: restricted label
domains, requirement operators, an immutable NodeClaim ``spec`` (``self == oldSelf``), a
NodePool that may not switch between static and dynamic provisioning. A controller that
breaks one must get the same 422 here as on a cluster, so the in-memory server evaluates them
with a real CEL implementation (``common-expression-language``; see docs/apiserver.md for why
that one) plus the Kubernetes function libraries (``cel_library``).

Semantics follow apiextensions-apiserver's ``schema/cel`` validator:

* a rule runs at its schema node, once per value there (per list item, per map entry);
  absent and null values are not validated;
* ``self`` is the value typed by its schema (``cel_values``); a rule using ``oldSelf`` is a
  transition rule: it runs only on update and only where an old value correlates
  (``correlate``), unless ``optionalOldSelf`` makes ``oldSelf`` an optional
  (``optional.none()`` on create);
* a failed rule reports ``<path>: Invalid value: "<schema type>": <message>`` (``message``,
  else ``messageExpression``'s result, else ``failed rule: <rule>``), at ``fieldPath`` below the
  node if given, with ``reason`` choosing Forbidden/Required/Duplicate wording; an evaluation
  error reports ``<error> evaluating rule: <message or rule>``; root rules report at ``<nil>``;
* ratcheting: on update, a failure of a rule without ``oldSelf`` in a subtree equal to its old
  value is not an error but a warning (evaluation errors are never ratcheted).

Rules are compiled once per text (``compile_expression``) and a CRD's rule tree once per
schema (``RuleValidator``); subtrees without rules are never visited. Outcomes are remembered
by the values they were computed on (``cel_memo``): a node's rules without ``oldSelf`` by the
fields of ``self`` they read, a subtree's pass by its value and its old value.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import cel

from karpenter_capi.sim.apiserver import cel_library, cel_values
from karpenter_capi.sim.apiserver.cel_memo import memo_key, pass_key, project, self_fields
from karpenter_capi.sim.apiserver.cel_paths import normalize_field_path
from karpenter_capi.sim.apiserver.correlate import (
    ABSENT,
    Correlation,
    Ratchet,
    deep_equal,
    key_ratchet,
    list_type,
    map_key,
    map_list_index,
    should_ratchet,
)
from karpenter_capi.sim.apiserver.messages import (
    FieldError,
    forbidden_field,
    invalid_value,
    required,
)

JsonObject = dict[str, Any]

REASONS = ("FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired")
_MAX_MESSAGE_BYTES = 5 * 1024  # kube's MaxEvaluatedMessageExpressionSizeBytes
_ROOT_PATH = "<nil>"
# The immutability idiom. When both sides are deep-equal JSON it is true without asking CEL
# (converting a large value for CEL costs far more than comparing it); otherwise CEL decides.
_IMMUTABLE = frozenset(
    {"self == oldSelf", "oldSelf == self"}
)  # how kube prints the nil field path of a rule on the resource root

_FUNCTIONS = cel_library.kubernetes_functions()
cel_library.quiet_function_failures()


class CompileError(ValueError):
    """A rule or message expression CEL cannot parse; the text says where."""


@functools.lru_cache(maxsize=4096)
def compile_expression(text: str) -> cel.Program:
    """The compiled program of ``text``, compiled once however many CRDs or nodes use it."""
    try:
        return cel.compile(text)
    except (ValueError, RuntimeError) as error:
        detail = str(error)
        # "Failed to parse expression '<text>': ERROR: ..." -> "ERROR: ..."
        _, found, rest = detail.partition("': ")
        parsed = rest if found and detail.startswith("Failed to parse") else detail
        raise CompileError(parsed) from None


@functools.lru_cache(maxsize=4096)
def uses_old_self(text: str) -> bool:
    """Whether the expression reads ``oldSelf`` (a transition rule)."""
    return "oldSelf" in compile_expression(text).variables()


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``x-kubernetes-validations`` entry, compiled."""

    text: str
    program: cel.Program | None  # None: empty rule (skipped) or compile error
    error: str | None
    message: str
    message_program: cel.Program | None
    message_uses_old_self: bool
    field_path: str
    reason: str | None
    uses_old_self: bool
    optional_old_self: bool
    immutability: bool  # the rule is ``self == oldSelf``

    @property
    def described(self) -> str:
        """kube's ``ruleErrorString``: the message, else the rule."""
        return self.message or self.text.strip()


def _compile_rule(raw: JsonObject, schema: JsonObject) -> Rule:
    text = str(raw.get("rule") or "")
    program: cel.Program | None = None
    error: str | None = None
    old_self = False
    if text.strip():
        try:
            program = compile_expression(text)
            old_self = uses_old_self(text)
        except CompileError as failure:
            error = str(failure)
    message_program: cel.Program | None = None
    message_uses_old_self = False
    expression = str(raw.get("messageExpression") or "")
    if expression.strip():
        try:
            message_program = compile_expression(expression)
            message_uses_old_self = uses_old_self(expression)
        except CompileError:
            message_program = None  # refused when the CRD was written; falls back to message
    try:
        field_path = normalize_field_path(str(raw.get("fieldPath") or ""), schema)
    except ValueError:
        field_path = ""
    return Rule(
        text=text,
        program=program,
        error=error,
        message=str(raw.get("message") or "").strip(),
        message_program=message_program,
        message_uses_old_self=message_uses_old_self,
        field_path=field_path,
        reason=raw.get("reason"),
        uses_old_self=old_self,
        optional_old_self=bool(raw.get("optionalOldSelf")),
        immutability=" ".join(text.split()) in _IMMUTABLE,
    )


# ---------------------------------------------------------------------------- the rule tree


class _Node:
    """Rules of one schema node and the children whose subtrees hold rules."""

    __slots__ = (
        "additional",
        "all_of",
        "convert",
        "embedded",
        "items",
        "memo",
        "memo_fields",
        "passed",
        "properties",
        "rule_nodes",
        "rules",
        "schema",
        "subtree_old_self",
        "uses_old_self",
    )

    def __init__(self, rules_schema: JsonObject, schema: JsonObject, resource_root: bool) -> None:
        self.schema = schema
        self.rules = tuple(
            _compile_rule(raw, schema)
            for raw in rules_schema.get("x-kubernetes-validations") or []
            if isinstance(raw, dict)
        )
        self.convert = cel_values.converter(schema, resource_root) if self.rules else None
        self.uses_old_self = any(rule.uses_old_self for rule in self.rules)
        # Outcomes of the rules without ``oldSelf`` by ``_memo_key(self)`` (``_Run._evaluate``);
        # a node's rules run under its ``RuleValidator``'s lock.
        plain = any(r.program is not None and not r.uses_old_self for r in self.rules)
        self.memo: dict[bytes, tuple[_Outcome, ...]] | None = {} if plain else None
        # ... keyed by the fields of ``self`` those rules read, where that is all they read.
        self.embedded = resource_root
        self.memo_fields = _fields_read(self.rules)
        self.properties: dict[str, _Node] = {}
        node_properties = schema.get("properties") or {}
        for name, child in (rules_schema.get("properties") or {}).items():
            target = node_properties.get(name)
            if isinstance(child, dict) and isinstance(target, dict):
                built = _build(child, target, bool(target.get("x-kubernetes-embedded-resource")))
                if built is not None:
                    self.properties[name] = built
        self.additional = _child(rules_schema, schema, "additionalProperties")
        self.items = _child(rules_schema, schema, "items")
        self.all_of = tuple(
            built
            for branch in rules_schema.get("allOf") or []
            if isinstance(branch, dict) and (built := _build(branch, schema, resource_root))
        )
        children = [*self.properties.values(), *self.all_of]
        children += [c for c in (self.additional, self.items) if c is not None]
        self.rule_nodes: int = bool(self.rules) + sum(c.rule_nodes for c in children)
        self.subtree_old_self: bool = self.uses_old_self or any(
            c.subtree_old_self for c in children
        )
        # The (value, old value) keys this subtree passed with (``cel_memo.pass_key``): where
        # it holds more than one node of rules, below a resource root (whose ``metadata``
        # changes with every write).
        self.passed: dict[bytes, None] | None = (
            {} if self.rule_nodes > 1 and not resource_root else None
        )

    @property
    def empty(self) -> bool:
        return not (self.rules or self.properties or self.additional or self.items or self.all_of)

    @property
    def type_name(self) -> str:
        return str(self.schema.get("type") or "")


def _fields_read(rules: tuple[Rule, ...]) -> frozenset[str] | None:
    """The fields of ``self`` a node's rules without ``oldSelf`` read (``cel_memo``)."""
    fields: set[str] = set()
    for rule in rules:
        if rule.program is None or rule.uses_old_self:
            continue
        found = self_fields(rule.text)
        if found is None:
            return None
        fields |= found
    return frozenset(fields)


def _child(rules_schema: JsonObject, schema: JsonObject, keyword: str) -> _Node | None:
    child, target = rules_schema.get(keyword), schema.get(keyword)
    if not (isinstance(child, dict) and isinstance(target, dict)):
        return None
    return _build(child, target, bool(target.get("x-kubernetes-embedded-resource")))


def _build(rules_schema: JsonObject, schema: JsonObject, resource_root: bool) -> _Node | None:
    node = _Node(rules_schema, schema, resource_root)
    return None if node.empty else node


class RuleValidator:
    """The compiled rules of one CRD version's schema. ``validate`` checks one write."""

    def __init__(self, schema: JsonObject) -> None:
        self._schema = schema
        self._root = _build(schema, schema, True)
        # One CEL context, its functions registered once: building one costs about as much as
        # evaluating a rule. Every rule binds ``self`` (and ``oldSelf`` when it reads it) before
        # running, so nothing a previous write bound is ever seen.
        self._context = cel.Context(functions=_FUNCTIONS)
        self._lock = threading.Lock()

    @property
    def has_rules(self) -> bool:
        return self._root is not None

    def validate(
        self, obj: JsonObject, old: JsonObject | None = None, warnings: list[str] | None = None
    ) -> list[FieldError]:
        """Errors of ``obj`` (``old`` is the stored object on update); ratcheted ones warn."""
        if self._root is None:
            return []
        root: Ratchet = (None, None)
        if old is not None:
            root = (Correlation(obj, old, self._schema), None)
        with self._lock:
            run = _Run(self._context, warnings)
            run.walk(self._root, obj, ABSENT if old is None else old, "", root)
        return run.errors


_Outcome = tuple[Any, str | None]
"""A rule's run: its result, or the detail of the error evaluating it."""
_MEMO_SIZE = 256
"""Values remembered per schema node (then forgotten all at once)."""


_memo_key = memo_key  # the tests' name for it


def _execute(rule: Rule, context: cel.Context) -> _Outcome:
    assert rule.program is not None
    try:
        return rule.program.execute(context), None
    except Exception as error:  # the bindings raise many types; all are rule errors
        return None, _evaluation_detail(error, rule)


class _Run:
    """One validation: its errors and warnings, and the CEL context its rules run in."""

    def __init__(self, context: cel.Context, warnings: list[str] | None) -> None:
        self.errors: list[FieldError] = []
        self.warnings = warnings
        self._context = context
        # Rules that did not hold (errors, ratcheted ones too): a subtree that added none passed.
        self.failures = 0

    def context(self) -> cel.Context:
        return self._context

    def walk(self, node: _Node, value: Any, old: Any, path: str, ratchet: Ratchet) -> None:
        if value is None:
            return  # rules check present values; a parent's rule checks presence
        if old is None:
            old = ABSENT
        passed = node.passed
        if passed is not None:
            key = pass_key(value, old, ABSENT, node.subtree_old_self)
            if key is not None:
                if key in passed:
                    return  # every rule below held for this pair: no error, no warning
                failures = self.failures
                self._walk(node, value, old, path, ratchet)
                if self.failures == failures:
                    if len(passed) >= _MEMO_SIZE:
                        passed.clear()
                    passed[key] = None
                return
        self._walk(node, value, old, path, ratchet)

    def _walk(self, node: _Node, value: Any, old: Any, path: str, ratchet: Ratchet) -> None:
        if node.rules:
            self._evaluate(node, value, old, path, ratchet)
        for branch in node.all_of:
            self.walk(branch, value, old, path, (None, ratchet[1]))
        if isinstance(value, dict):
            self._walk_map(node, value, old, path, ratchet)
        elif isinstance(value, list):
            self._walk_list(node, value, old, path, ratchet)

    def _walk_map(
        self, node: _Node, value: dict[str, Any], old: Any, path: str, ratchet: Ratchet
    ) -> None:
        """Each entry under its property's schema, or the additional properties' one."""
        old_map = old if isinstance(old, dict) else {}
        for key, item in value.items():
            if node.properties:
                child = node.properties.get(key)
                where = f"{path}.{key}" if path else key
            else:
                child = node.additional
                where = f"{path}[{key}]"
            if child is not None:
                self.walk(child, item, old_map.get(key, ABSENT), where, key_ratchet(ratchet, key))

    def _walk_list(
        self, node: _Node, value: list[Any], old: Any, path: str, ratchet: Ratchet
    ) -> None:
        """Each item under the items' schema; a map list's item is compared with the old item
        of the same key (transition rules), any other's with none."""
        items = node.items
        if items is None:
            return
        schema = node.schema
        keyed = list_type(schema) == "map"
        old_items = map_list_index(schema, old) if keyed else {}
        current = ratchet[0]
        for index, item in enumerate(value):
            old_item = ABSENT
            if keyed:
                found_key = map_key(schema, item)
                old_item = ABSENT if found_key is None else old_items.get(found_key, ABSENT)
            child_ratchet = (
                ratchet if current is None else (current.index(index, old_item), current)
            )
            self.walk(items, item, old_item, f"{path}[{index}]", child_ratchet)

    def _evaluate(self, node: _Node, value: Any, old: Any, path: str, ratchet: Ratchet) -> None:
        old_value: Any = ABSENT
        if old is not ABSENT and node.uses_old_self:
            old_value = node.convert(old) if node.convert else old
        where = path or _ROOT_PATH
        for rule, (result, detail) in self._outcomes(node, value, old, old_value):
            if detail is not None or result is not True:
                self.failures += 1
            if detail is not None:
                self.errors.append(invalid_value(where, node.type_name, detail))
            elif result is not True:
                if rule.message_program is not None:  # it reads ``self``, maybe not bound
                    self._bind_self(node, value)
                self._report(node, rule, result, path=path, old_value=old_value, ratchet=ratchet)

    def _bind_self(self, node: _Node, value: Any) -> None:
        self.context().add_variable("self", node.convert(value) if node.convert else value)

    def _outcomes(
        self, node: _Node, value: Any, old: Any, old_value: Any
    ) -> Iterator[tuple[Rule, _Outcome]]:
        """Each rule that applies here, with its outcome. Those of the rules without
        ``oldSelf`` are a function of ``self`` alone: for a value seen before at this node
        (the same JSON, ``_memo_key``) they are the remembered ones (``_Node.memo``)."""
        context = self.context()
        self_bound = False  # converting a value for CEL is the costly step: only when needed
        memo = node.memo
        key = None
        if memo is not None:
            key = memo_key(project(value, node.memo_fields, node.embedded))
        known = memo.get(key) if memo is not None and key is not None else None
        fresh: list[_Outcome] = []
        for rule in node.rules:
            if rule.error is not None:
                yield rule, (None, f"rule compile error: {rule.error}")
                continue
            if rule.program is None:
                continue
            if rule.uses_old_self:
                if not _bind_old_self(context, rule, value, old, old_value):
                    continue
            elif known is not None:
                outcome = known[len(fresh)]
                fresh.append(outcome)
                yield rule, outcome
                continue
            if not self_bound:
                self._bind_self(node, value)
                self_bound = True
            outcome = _execute(rule, context)
            if not rule.uses_old_self:
                fresh.append(outcome)
            yield rule, outcome
        if memo is not None and key is not None and known is None:
            if len(memo) >= _MEMO_SIZE:
                memo.clear()
            memo[key] = tuple(fresh)

    def _report(
        self, node: _Node, rule: Rule, result: Any, *, path: str, old_value: Any, ratchet: Ratchet
    ) -> None:
        """Record a rule that did not hold: a non-bool result is an error of the rule itself;
        a plain ``false`` is the user's error, or only a warning when ratcheting forgives it."""
        if result is not False:
            detail = f"rule evaluated to {type(result).__name__}, not a bool"
            self.errors.append(
                invalid_value(
                    path or _ROOT_PATH,
                    node.type_name,
                    f"{detail} evaluating rule: {rule.described}",
                )
            )
            return
        field = path
        if rule.field_path:
            field = f"{path}.{rule.field_path}" if path else rule.field_path
        failed = _rule_error(
            rule, field or _ROOT_PATH, node.type_name, self._message(rule, old_value)
        )
        if not rule.uses_old_self and should_ratchet(ratchet):
            if self.warnings is not None:
                self.warnings.append(failed.render())
        else:
            self.errors.append(failed)

    def _message(self, rule: Rule, old_value: Any) -> str:
        """``messageExpression``'s result when it gives a usable one, else the static message."""
        if rule.message_program is not None and not (
            rule.message_uses_old_self and old_value is ABSENT
        ):
            context = self.context()
            if rule.message_uses_old_self:
                context.add_variable("oldSelf", old_value)
            try:
                produced = rule.message_program.execute(context)
            except Exception:  # kube logs it and falls back to the message
                produced = None
            if isinstance(produced, str):
                text = produced.strip()
                if text and "\n" not in text and len(text.encode()) <= _MAX_MESSAGE_BYTES:
                    return text
        return rule.message or f"failed rule: {rule.text.strip()}"


def _rule_error(rule: Rule, field: str, type_name: str, detail: str) -> FieldError:
    if rule.reason == "FieldValueForbidden":
        return forbidden_field(field, detail)
    if rule.reason == "FieldValueRequired":
        return required(field, detail)
    if rule.reason == "FieldValueDuplicate":
        return FieldError(field, "FieldValueDuplicate", f'Duplicate value: "{type_name}"')
    return invalid_value(field, type_name, detail)


_ADVICE = re.compile(r"\.? (Check|CEL does not|Convert explicitly|Check that) .*$", re.DOTALL)
_FUNCTION_FAILURE = re.compile(
    r"^Function '([^']+)' error: (?:Python function call failed: \w+: )?(.*)$", re.DOTALL
)
_OVERLOAD = ("No such overload", "Unsupported operation", "Unexpected type")


def _evaluation_detail(error: Exception, rule: Rule) -> str:
    """kube's wording of a rule that failed to evaluate, around the evaluator's own reason."""
    if isinstance(error, KeyError):
        reason = f"no such key: {error.args[0] if error.args else ''}"
    elif isinstance(error, ZeroDivisionError):
        reason = "division by zero"
    elif isinstance(error, OverflowError):
        reason = "integer overflow"
    else:
        text = str(error).strip()
        if isinstance(error, TypeError) and text.startswith(_OVERLOAD):
            return (
                "'no such overload': call arguments did not match a supported operator, "
                f"function or macro signature for rule: {rule.described}"
            )
        text = _ADVICE.sub("", text)
        matched = _FUNCTION_FAILURE.match(text)
        if matched:
            name, why = matched.groups()
            text = why if why.startswith(f"{name}:") else f"{name}: {why}"
        reason = text[:1].lower() + text[1:]
    return f"{reason} evaluating rule: {rule.described}"


def _bind_old_self(context: cel.Context, rule: Rule, value: Any, old: Any, old_value: Any) -> bool:
    """Bind ``oldSelf`` for a transition rule; False when the rule does not apply this time.

    A transition rule needs something to transition from (unless ``optionalOldSelf``), and an
    immutability rule (``self == oldSelf``) holds without running CEL when the value is unchanged.
    """
    if old_value is ABSENT and not rule.optional_old_self:
        return False
    if rule.immutability and deep_equal(value, old):
        return False  # CEL equality agrees with deep_equal
    if rule.optional_old_self:
        optional = (
            cel.OptionalValue.none() if old_value is ABSENT else cel.OptionalValue.of(old_value)
        )
        context.add_variable("oldSelf", optional)
    else:
        context.add_variable("oldSelf", old_value)
    return True
