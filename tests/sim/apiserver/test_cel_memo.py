"""``RuleValidator`` remembers, per schema node, the outcomes of the rules without ``oldSelf``
by the value they ran on (``_Node.memo``): a NodeClaim's rules all sit under its immutable
``spec``, and every status write ran them again on the same values. These tests pin that a
remembered outcome is exactly what running the rules again would give: for the value it was
computed on only, with the current value's messages, ratcheted as the current write asks."""

from __future__ import annotations

from typing import Any

from karpenter_capi.sim.apiserver.cel import RuleValidator, _memo_key

Schema = dict[str, Any]

_SPEC: Schema = {
    "type": "object",
    "properties": {
        "replicas": {"type": "integer"},
        "size": {
            "type": "integer",
            "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "must grow"}],
        },
        "code": {
            "type": "string",
            "x-kubernetes-validations": [{"rule": "int(self) > 0", "message": "positive"}],
        },
    },
    "x-kubernetes-validations": [
        {
            "rule": "!has(self.replicas) || self.replicas < 3",
            "messageExpression": "'got ' + string(self.replicas)",
        }
    ],
}


def _validator() -> RuleValidator:
    return RuleValidator(
        {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": _SPEC,
            },
        }
    )


def _obj(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "e.com/v1", "kind": "W", "metadata": {"name": "w"}, "spec": spec}


def _run(
    validator: RuleValidator, obj: dict[str, Any], old: dict[str, Any] | None = None
) -> tuple[list[str], list[str]]:
    warnings: list[str] = []
    errors = validator.validate(obj, old, warnings)
    return [e.render() for e in errors], warnings


def test_a_value_seen_again_gets_the_same_outcome_and_its_own_message() -> None:
    validator = _validator()
    five = ([], []), (['spec: Invalid value: "object": got 5'], [])
    assert _run(validator, _obj(replicas=1)) == five[0]
    assert _run(validator, _obj(replicas=5)) == five[1]
    assert _run(validator, _obj(replicas=7)) == (['spec: Invalid value: "object": got 7'], [])
    # Remembered outcomes; the messageExpression reads this value, not the last one run.
    assert _run(validator, _obj(replicas=5)) == five[1]
    assert _run(validator, _obj(replicas=1)) == five[0]


def test_a_remembered_failure_ratchets_as_the_current_write_asks() -> None:
    validator = _validator()
    bad = _obj(replicas=5)
    assert _run(validator, bad) == (['spec: Invalid value: "object": got 5'], [])
    # The same value unchanged on update: a warning now, though its outcome was remembered.
    assert _run(validator, bad, bad) == ([], ['spec: Invalid value: "object": got 5'])
    assert _run(validator, bad, _obj(replicas=1))[0] == ['spec: Invalid value: "object": got 5']


def test_evaluation_errors_are_remembered_and_transition_rules_always_run() -> None:
    validator = _validator()
    error = (
        'spec.code: Invalid value: "string": int: string parse error: invalid digit found in '
        "string evaluating rule: positive"
    )
    assert _run(validator, _obj(code="x"))[0] == [error]
    assert _run(validator, _obj(code="x"), _obj(code="x"))[0] == [error]  # never ratcheted
    # ``self >= oldSelf`` depends on the old value too: never taken from the memo.
    assert _run(validator, _obj(size=3), _obj(size=2))[0] == []
    assert _run(validator, _obj(size=3), _obj(size=4))[0] == [
        'spec.size: Invalid value: "integer": must grow'
    ]
    assert _run(validator, _obj(size=3), _obj(size=2))[0] == []


def test_memo_keys_tell_apart_what_cel_tells_apart() -> None:
    assert _memo_key(True) != _memo_key(1)
    assert _memo_key(1) != _memo_key(1.0)
    assert _memo_key({"a": 1, "b": 2}) != _memo_key({"b": 2, "a": 1})  # order may matter
    assert _memo_key([1, "1"]) == _memo_key([1, "1"])
    # orjson writes NaN and infinities as null: such values are never remembered.
    assert _memo_key([float("nan")]) is None
    assert _memo_key({"x": float("inf")}) is None
    assert _memo_key(2**70) is None  # past 64 bits: orjson refuses
