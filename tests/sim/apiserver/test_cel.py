"""The CEL rule evaluator on its own: libraries, where rules run, what failures say.

Each test builds a small CRD schema, runs ``RuleValidator`` over an object (and an old object
for updates) and checks the field errors a client would see in the 422's causes.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.sim.apiserver.cel import RuleValidator
from karpenter_capi.sim.apiserver.cel_paths import normalize_field_path
from karpenter_capi.sim.apiserver.cel_values import parse_go_duration
from karpenter_capi.sim.apiserver.messages import FieldError

Schema = dict[str, Any]


def _crd_schema(spec: Schema, root_rules: list[Schema] | None = None) -> Schema:
    schema: Schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
        },
    }
    if root_rules:
        schema["x-kubernetes-validations"] = root_rules
    return schema


def _object(spec: Any, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default", **meta},
        "spec": spec,
    }


def _check(
    spec_schema: Schema,
    spec: Any,
    old_spec: Any = None,
    *,
    warnings: list[str] | None = None,
    root_rules: list[Schema] | None = None,
) -> list[FieldError]:
    validator = RuleValidator(_crd_schema(spec_schema, root_rules))
    old = None if old_spec is None else _object(old_spec)
    return validator.validate(_object(spec), old, warnings)


def _rendered(errors: list[FieldError]) -> list[str]:
    return [e.render() for e in errors]


def _open(rule: str) -> Schema:
    """A spec that keeps whatever it is given, with one rule on it."""
    return {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "x-kubernetes-validations": [{"rule": rule}],
    }


# ------------------------------------------------------------------------------ libraries


@pytest.mark.parametrize(
    "rule",
    [
        # regex library
        "self.s.find('[0-9]+') == '123'",
        "self.s.find('^z') == ''",
        "self.s.findAll('[0-9]+') == ['123', '456']",
        "self.s.findAll('[0-9]+', 1) == ['123']",
        "'karpenter.sh/nodepool'.find('^([^/]+)').endsWith('karpenter.sh')",
        # strings extension
        "'hello'.charAt(1) == 'e'",
        "'hello'.indexOf('l') == 2",
        "'hello'.lastIndexOf('l') == 3",
        "'HeLLo'.lowerAscii() == 'hello'",
        "'HeLLo'.upperAscii() == 'HELLO'",
        "'a-b-c'.replace('-', '+') == 'a+b+c'",
        "'a,b,c'.split(',') == ['a', 'b', 'c']",
        "'hello'.substring(1, 3) == 'el'",
        "'  x '.trim() == 'x'",
        "['a', 'b'].join('-') == 'a-b'",
        # Kubernetes list library
        "[1, 2, 2, 3].isSorted()",
        "!['b', 'a'].isSorted()",
        "[1, 2, 3].sum() == 6",
        "[3, 1, 2].min() == 1",
        "[3, 1, 2].max() == 3",
        "[1, 2, 1].indexOf(1) == 0",
        "[1, 2, 1].lastIndexOf(1) == 2",
        "[true, 1].indexOf(1) == 1",
        "self.n.indexOf(7) == -1",
        # sets, encoders, conversions
        "sets.contains([1, 2, 3], [2, 3])",
        "sets.intersects([1, 2], [2, 5])",
        "base64.decode('aGk=') == b'hi'",
        "bool('true')",
        # standard CEL on JSON values
        "has(self.s) && !has(self.missing)",
        "'s' in self && self.n.size() == 3",
        "self.n.all(x, x > 0) && self.n.exists_one(x, x == 2)",
        "self.n.map(x, x * 2) == [2, 4, 6]",
        "int(self.digits) == 42",
        "self == {'s': 'abc123def456', 'n': [1, 2, 3], 'digits': '42'}",
    ],
)
def test_library_functions_and_standard_cel_hold(rule: str) -> None:
    spec = {"s": "abc123def456", "n": [1, 2, 3], "digits": "42"}
    assert _check(_open(rule), spec) == []


@pytest.mark.parametrize(
    ("rule", "reason"),
    [
        ("self.missing == 1", "no such key: missing"),
        ("int(self.s) > 0", "int: string parse error: invalid digit found in string"),
        ("self.n[7] == 1", "index out of bounds: 7"),
        ("self.n[0] / 0 == 1", "division by zero"),
        ("[].min() == 0", "min: min called on empty list"),
        ("'abc'.charAt(9) == 'x'", "charAt: index 9 out of range for string of length 3"),
    ],
)
def test_evaluation_errors_reject_with_the_error_and_the_rule(rule: str, reason: str) -> None:
    errors = _check(_open(rule), {"s": "abc", "n": [1]})
    assert _rendered(errors) == [f'spec: Invalid value: "object": {reason} evaluating rule: {rule}']


def test_a_type_mismatch_at_runtime_is_kubes_no_such_overload() -> None:
    spec_schema = {
        "type": "object",
        "properties": {"budget": {"x-kubernetes-int-or-string": True}},
        "x-kubernetes-validations": [{"rule": "self.budget + 1 > 0", "message": "budget"}],
    }
    assert _check(spec_schema, {"budget": 3}) == []
    assert _rendered(_check(spec_schema, {"budget": "10%"})) == [
        "spec: Invalid value: \"object\": 'no such overload': call arguments did not match a "
        "supported operator, function or macro signature for rule: budget"
    ]


# ----------------------------------------------------------------------- where rules run


_WIDGET: Schema = {
    "type": "object",
    "properties": {
        "name": {
            "type": "string",
            "x-kubernetes-validations": [
                {"rule": "!self.startsWith('kube-')", "message": "name is reserved"}
            ],
        },
        "ports": {
            "type": "array",
            "items": {
                "type": "integer",
                "x-kubernetes-validations": [{"rule": "self > 1024"}],
            },
        },
        "labels": {
            "type": "object",
            "additionalProperties": {
                "type": "string",
                "x-kubernetes-validations": [{"rule": "self.size() <= 3"}],
            },
            "x-kubernetes-validations": [{"rule": "!('forbidden' in self)"}],
        },
        "optional": {
            "type": "string",
            "nullable": True,
            "x-kubernetes-validations": [{"rule": "false", "message": "never valid"}],
        },
    },
}


def test_rules_report_at_their_node_with_its_schema_type() -> None:
    errors = _check(
        _WIDGET,
        {
            "name": "kube-proxy",
            "ports": [8080, 80, 22],
            "labels": {"team": "web", "forbidden": "toolong"},
        },
    )
    assert _rendered(errors) == [
        'spec.name: Invalid value: "string": name is reserved',
        'spec.ports[1]: Invalid value: "integer": failed rule: self > 1024',
        'spec.ports[2]: Invalid value: "integer": failed rule: self > 1024',
        "spec.labels: Invalid value: \"object\": failed rule: !('forbidden' in self)",
        'spec.labels[forbidden]: Invalid value: "string": failed rule: self.size() <= 3',
    ]
    assert [e.reason for e in errors] == ["FieldValueInvalid"] * 5


def test_absent_and_null_values_are_not_validated() -> None:
    assert _check(_WIDGET, {"name": "web"}) == []
    assert _check(_WIDGET, {"name": "web", "optional": None}) == []
    assert _rendered(_check(_WIDGET, {"optional": "x"})) == [
        'spec.optional: Invalid value: "string": never valid'
    ]


def test_root_rules_report_at_nil_and_see_only_name_and_generate_name() -> None:
    root_rules = [
        {"rule": "self.metadata.name.startsWith('w')", "message": "bad name"},
        {"rule": "!has(self.metadata.labels)", "message": "labels are not visible"},
        {"rule": "self.kind == 'Widget' && self.spec.size > 1", "message": "too small"},
    ]
    spec_schema = {"type": "object", "properties": {"size": {"type": "integer"}}}
    validator = RuleValidator(_crd_schema(spec_schema, root_rules))
    errors = validator.validate(_object({"size": 1}, labels={"a": "b"}))
    assert _rendered(errors) == ['<nil>: Invalid value: "object": too small']


def test_numbers_are_doubles_and_formats_are_typed() -> None:
    spec_schema = {
        "type": "object",
        "properties": {
            "ratio": {"type": "number"},
            "at": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "every": {"type": "string", "format": "duration"},
            "blob": {"type": "string", "format": "byte"},
        },
        "x-kubernetes-validations": [
            {"rule": "self.ratio == 1.0 && type(self.ratio) == double"},
            {"rule": "self.at < timestamp('2030-01-01T00:00:00Z')"},
            {"rule": "self.day == timestamp('2024-02-29T00:00:00Z')"},
            {"rule": "self.every > duration('1m') && self.every < duration('2h')"},
            {"rule": "self.blob == b'hi'"},
        ],
    }
    spec = {
        "ratio": 1,
        "at": "2024-02-02T19:54:34Z",
        "day": "2024-02-29",
        "every": "1h30m",
        "blob": "aGk=",
    }
    assert _check(spec_schema, spec) == []
    assert len(_check(spec_schema, {**spec, "every": "30s"})) == 1


def test_property_names_are_escaped_as_kube_escapes_them() -> None:
    spec_schema = {
        "type": "object",
        "properties": {
            "foo-bar": {"type": "string"},
            "namespace": {"type": "string"},
            "a.b/c": {"type": "string"},
            "x__y": {"type": "string"},
        },
        "x-kubernetes-validations": [
            {
                "rule": "self.foo__dash__bar == '1' && self.__namespace__ == '2' && "
                "self.a__dot__b__slash__c == '3' && self.x__underscores__y == '4'"
            }
        ],
    }
    spec = {"foo-bar": "1", "namespace": "2", "a.b/c": "3", "x__y": "4"}
    assert _check(spec_schema, spec) == []


def test_go_durations_parse_like_the_openapi_duration_format() -> None:
    assert parse_go_duration("1h30m").total_seconds() == 5400  # type: ignore[union-attr]
    assert parse_go_duration("1.5s").total_seconds() == 1.5  # type: ignore[union-attr]
    assert parse_go_duration("-2m").total_seconds() == -120  # type: ignore[union-attr]
    assert parse_go_duration("3d").total_seconds() == 3 * 86400  # type: ignore[union-attr]
    assert parse_go_duration("0").total_seconds() == 0  # type: ignore[union-attr]
    assert parse_go_duration("1x") is None
    assert parse_go_duration("h") is None


# ------------------------------------------------------- message, messageExpression, reason


def _failing(**rule: Any) -> Schema:
    return {
        "type": "object",
        "properties": {
            "replicas": {"type": "integer"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "x-kubernetes-validations": [{"rule": "self.replicas < 3", **rule}],
    }


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ({}, 'spec: Invalid value: "object": failed rule: self.replicas < 3'),
        ({"message": "  too many  "}, 'spec: Invalid value: "object": too many'),
        (
            {"message": "static", "messageExpression": "'got ' + string(self.replicas)"},
            'spec: Invalid value: "object": got 5',
        ),
        (
            {"message": "static", "messageExpression": "self.missing"},
            'spec: Invalid value: "object": static',
        ),
        (
            {"message": "static", "messageExpression": "self.replicas"},
            'spec: Invalid value: "object": static',
        ),
        (
            {"message": "static", "messageExpression": "'  '"},
            'spec: Invalid value: "object": static',
        ),
        (
            {"messageExpression": "'a\\nb'"},
            'spec: Invalid value: "object": failed rule: self.replicas < 3',
        ),
        (
            {"message": "m", "fieldPath": ".replicas"},
            'spec.replicas: Invalid value: "object": m',
        ),
        (
            {"message": "m", "fieldPath": ".labels['app.kubernetes.io/name']"},
            'spec.labels[app.kubernetes.io/name]: Invalid value: "object": m',
        ),
        ({"message": "m", "reason": "FieldValueForbidden"}, "spec: Forbidden: m"),
        ({"message": "m", "reason": "FieldValueRequired"}, "spec: Required value: m"),
        ({"message": "m", "reason": "FieldValueDuplicate"}, 'spec: Duplicate value: "object"'),
        ({"message": "m", "reason": "FieldValueInvalid"}, 'spec: Invalid value: "object": m'),
    ],
)
def test_failure_wording(rule: Schema, expected: str) -> None:
    errors = _check(_failing(**rule), {"replicas": 5, "labels": {}})
    assert _rendered(errors) == [expected]


def test_reason_sets_the_cause_type() -> None:
    errors = _check(_failing(message="m", reason="FieldValueForbidden"), {"replicas": 5})
    assert [(e.field, e.reason, e.message) for e in errors] == [
        ("spec", "FieldValueForbidden", "Forbidden: m")
    ]


def test_field_paths_normalise_like_kubes() -> None:
    schema = _failing()
    assert normalize_field_path(".replicas", schema) == "replicas"
    assert normalize_field_path("['replicas']", schema) == "replicas"
    assert normalize_field_path(".labels['a.b']", schema) == "labels[a.b]"
    assert normalize_field_path(".labels.x", schema) == "labels[x]"
    for bad in (".nope", "replicas", ".labels[0]", ".replicas.x", "."):
        with pytest.raises(ValueError):  # noqa: PT011 - any ValueError is "invalid"
            normalize_field_path(bad, schema)


# ------------------------------------------------------------------------ transition rules


def _immutable(schema: Schema, message: str = "immutable") -> Schema:
    return {**schema, "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": message}]}


_CORRELATION: Schema = {
    "type": "object",
    "properties": {
        "pinned": _immutable({"type": "string"}, "pinned is immutable"),
        "byName": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "size": _immutable({"type": "integer"}, "size is immutable"),
                },
            },
        },
        "quotas": {
            "type": "object",
            "additionalProperties": _immutable({"type": "integer"}, "quota is immutable"),
        },
    },
}


def test_transition_rules_do_not_run_on_create() -> None:
    spec = {"pinned": "a", "byName": [{"name": "x", "size": 1}], "quotas": {"cpu": 1}}
    assert _check(_CORRELATION, spec) == []


def test_properties_map_list_items_and_map_values_correlate() -> None:
    old = {
        "pinned": "a",
        "byName": [{"name": "x", "size": 1}, {"name": "y", "size": 2}],
        "quotas": {"cpu": 1, "memory": 2},
    }
    # Reordered items are matched by key; a new key and a new map entry have no old value.
    unchanged = {
        "pinned": "a",
        "byName": [{"name": "y", "size": 2}, {"name": "x", "size": 1}, {"name": "z", "size": 9}],
        "quotas": {"memory": 2, "cpu": 1, "disk": 5},
    }
    assert _check(_CORRELATION, unchanged, old) == []
    changed = {
        "pinned": "b",
        "byName": [{"name": "y", "size": 3}, {"name": "x", "size": 1}],
        "quotas": {"cpu": 4},
    }
    assert _rendered(_check(_CORRELATION, changed, old)) == [
        'spec.pinned: Invalid value: "string": pinned is immutable',
        'spec.byName[0].size: Invalid value: "integer": size is immutable',
        'spec.quotas[cpu]: Invalid value: "integer": quota is immutable',
    ]


def test_a_field_absent_before_skips_its_transition_rules() -> None:
    assert _check(_CORRELATION, {"pinned": "new"}, {"quotas": {}}) == []
    assert _check(_CORRELATION, {"quotas": {}}, {"pinned": "old"}) == []


@pytest.mark.parametrize("list_type", ["set", "atomic", None])
def test_items_of_other_lists_do_not_correlate(list_type: str | None) -> None:
    items_schema: Schema = {"type": "array", "items": _immutable({"type": "string"})}
    if list_type:
        items_schema["x-kubernetes-list-type"] = list_type
    spec_schema = {"type": "object", "properties": {"tags": items_schema}}
    assert _check(spec_schema, {"tags": ["b"]}, {"tags": ["a"]}) == []


def test_optional_old_self_runs_on_create_with_an_empty_optional() -> None:
    spec_schema = {
        "type": "object",
        "properties": {"size": {"type": "integer"}},
        "x-kubernetes-validations": [
            {
                "rule": "self.size >= oldSelf.orValue({'size': 0}).size",
                "message": "size may only grow",
                "optionalOldSelf": True,
            },
            {
                "rule": "!oldSelf.hasValue() || oldSelf.value().size != 13",
                "message": "13 was a bad size",
                "optionalOldSelf": True,
            },
            {"rule": "oldSelf.hasValue()", "message": "created", "optionalOldSelf": True},
        ],
    }
    assert _rendered(_check(spec_schema, {"size": 1})) == ['spec: Invalid value: "object": created']
    assert _check(spec_schema, {"size": 2}, {"size": 1}) == []
    assert _rendered(_check(spec_schema, {"size": 14}, {"size": 13})) == [
        'spec: Invalid value: "object": 13 was a bad size'
    ]
    assert _rendered(_check(spec_schema, {"size": 0}, {"size": 1})) == [
        'spec: Invalid value: "object": size may only grow'
    ]


def test_message_expressions_can_read_old_self() -> None:
    spec_schema = {
        "type": "object",
        "properties": {"size": {"type": "integer"}},
        "x-kubernetes-validations": [
            {
                "rule": "self.size >= oldSelf.size",
                "messageExpression": "'size went from ' + string(oldSelf.size) + ' to ' + "
                "string(self.size)",
            }
        ],
    }
    assert _rendered(_check(spec_schema, {"size": 1}, {"size": 3})) == [
        'spec: Invalid value: "object": size went from 3 to 1'
    ]


# ------------------------------------------------------------------------------ ratcheting

_RATCHETED: Schema = {
    "type": "object",
    "properties": {
        "name": {
            "type": "string",
            "x-kubernetes-validations": [{"rule": "self.size() <= 5", "message": "too long"}],
        },
        "size": {
            "type": "integer",
            "x-kubernetes-validations": [
                {"rule": "self >= oldSelf", "message": "size may only grow"},
                {"rule": "self < 100", "message": "too big"},
            ],
        },
        "code": {
            "type": "string",
            "x-kubernetes-validations": [{"rule": "int(self) > 0", "message": "positive"}],
        },
        "tags": {
            "type": "array",
            "x-kubernetes-list-type": "set",
            "items": {
                "type": "string",
                "x-kubernetes-validations": [{"rule": "self != 'bad'", "message": "bad tag"}],
            },
        },
    },
}


def test_an_unchanged_failing_value_is_a_warning_not_an_error() -> None:
    old = {"name": "much-too-long", "size": 200}
    warnings: list[str] = []
    assert _check(_RATCHETED, old, old, warnings=warnings) == []
    assert warnings == [
        'spec.name: Invalid value: "string": too long',
        'spec.size: Invalid value: "integer": too big',
    ]
    assert _rendered(_check(_RATCHETED, {**old, "name": "still-too-long"}, old)) == [
        'spec.name: Invalid value: "string": too long'
    ]
    # On create nothing ratchets.
    assert len(_check(_RATCHETED, old)) == 2


def test_transition_rules_and_evaluation_errors_never_ratchet() -> None:
    shrunk = {"size": 5, "code": "x"}
    errors = _check(_RATCHETED, shrunk, {"size": 5, "code": "x"})
    assert _rendered(errors) == [
        'spec.code: Invalid value: "string": int: string parse error: invalid digit found in '
        "string evaluating rule: positive"
    ]
    monotonic = {
        **_RATCHETED,
        "properties": {
            "size": {
                "type": "integer",
                "x-kubernetes-validations": [{"rule": "self > oldSelf", "message": "must grow"}],
            }
        },
    }
    assert _rendered(_check(monotonic, {"size": 5}, {"size": 5})) == [
        'spec.size: Invalid value: "integer": must grow'
    ]


def test_set_items_ratchet_only_with_their_whole_list() -> None:
    old = {"tags": ["bad", "ok"]}
    assert _check(_RATCHETED, {"tags": ["bad", "ok"]}, old) == []
    assert _rendered(_check(_RATCHETED, {"tags": ["bad", "ok", "new"]}, old)) == [
        'spec.tags[0]: Invalid value: "string": bad tag'
    ]
