"""In process: the patch engines against the RFC examples and kube's strategic-merge directives."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.kube.errors import BadRequest, Invalid
from karpenter_capi.sim.apiserver.patch import json_patch, merge_patch
from karpenter_capi.sim.apiserver.strategic import strategic_merge_patch


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [  # RFC 7386 appendix A
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch_rfc7386_examples(target: Any, patch: Any, expected: Any) -> None:
    assert merge_patch(target, patch) == expected


def test_merge_patch_does_not_modify_its_inputs() -> None:
    target = {"a": {"b": 1}}
    patch = {"a": {"c": [1]}}
    result = merge_patch(target, patch)
    result["a"]["c"].append(2)
    assert target == {"a": {"b": 1}}
    assert patch == {"a": {"c": [1]}}


def test_json_patch_rfc6902_examples() -> None:
    assert json_patch(
        {"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}]
    ) == {"foo": ["bar", "qux", "baz"]}
    assert json_patch({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}]) == {
        "foo": "bar"
    }
    assert json_patch(
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
    ) == {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}
    assert json_patch({"/": 1, "m~n": 2}, [{"op": "test", "path": "/~1", "value": 1}]) == {
        "/": 1,
        "m~n": 2,
    }
    assert json_patch({"m~n": 2}, [{"op": "replace", "path": "/m~0n", "value": 3}]) == {"m~n": 3}
    assert json_patch(
        {"foo": "bar"}, [{"op": "add", "path": "/child", "value": {"grandchild": {}}}]
    ) == {
        "foo": "bar",
        "child": {"grandchild": {}},
    }


@pytest.mark.parametrize(
    "operations",
    [
        [{"op": "add", "path": "/baz/bat", "value": "qux"}],  # parent missing
        [{"op": "test", "path": "/baz", "value": "bar"}],
        [{"op": "replace", "path": "/missing", "value": 1}],
        [{"op": "remove", "path": "/list/5"}],
        [{"op": "add", "path": "/list/01", "value": 1}],
    ],
)
def test_json_patch_failures_are_invalid(operations: list[dict[str, Any]]) -> None:
    with pytest.raises(Invalid):
        json_patch({"baz": "qux", "list": [1]}, operations)


def test_json_patch_malformed_documents_are_bad_requests() -> None:
    with pytest.raises(BadRequest):
        json_patch({}, {"op": "add"})
    with pytest.raises(BadRequest):
        json_patch({}, [{"op": "frobnicate", "path": "/a"}])
    with pytest.raises(BadRequest):
        json_patch({}, [{"op": "add", "path": "/a"}])


def test_strategic_replace_directive_on_a_map_and_a_list() -> None:
    original = {
        "metadata": {"labels": {"a": "1", "b": "2"}},
        "spec": {"containers": [{"name": "x", "image": "1"}, {"name": "y", "image": "1"}]},
    }
    patched = strategic_merge_patch(
        original,
        {
            "metadata": {"labels": {"$patch": "replace", "c": "3"}},
            "spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "2"}]},
        },
        "Pod",
    )
    assert patched["metadata"]["labels"] == {"c": "3"}
    assert patched["spec"]["containers"] == [{"name": "z", "image": "2"}]


def test_strategic_merges_service_ports_by_port_and_ignores_element_order() -> None:
    original = {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}}
    patched = strategic_merge_patch(
        original,
        {
            "spec": {
                "$setElementOrder/ports": [{"port": 80}, {"port": 443}],
                "ports": [{"port": 443, "targetPort": 8443}],
            }
        },
        "Service",
    )
    assert patched["spec"]["ports"] == [
        {"port": 80, "name": "http"},
        {"port": 443, "name": "https", "targetPort": 8443},
    ]


def test_strategic_list_element_without_merge_key_is_rejected() -> None:
    with pytest.raises(BadRequest, match="does not contain declared merge key"):
        strategic_merge_patch(
            {"spec": {"containers": [{"name": "a"}]}},
            {"spec": {"containers": [{"image": "b"}]}},
            "Pod",
        )
