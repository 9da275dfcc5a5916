"""Writes of custom resources through the whole CRD path keep their exact outcomes.

A sequence of valid and invalid creates and patches (main resource and status) of a CRD with
every kind of rule the server evaluates: root rules, plain and transition rules,
``optionalOldSelf``, ``messageExpression``, map lists, sets, an immutable subtree, schema
errors, and a rule added after objects were stored (ratcheting: an unchanged failing value
warns, a changed one is refused). The same writes repeat, so outcomes remembered by the
server's caches are checked against the first ones. The expected outcomes were recorded
from the server before its CRD path kept any cache of outcomes by value; each write's
result is its 422's message or the stored object, and its warnings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.kube.resources import NODECLAIMS, NODEPOOLS, Resource
from karpenter_capi.sim.apiserver import InMemoryAPIServer

JsonObject = dict[str, Any]
WIDGETS = Resource("example.com", "v1", "widgets", "Widget", True)
_EXPECTED = Path(__file__).with_name("crd_write_outcomes.json")


def _spec_schema(tag_limit: int) -> JsonObject:
    fixed_a: JsonObject = {"type": "string"}
    if tag_limit < 10:  # the stricter schema: stored values of fixed.a break it too
        fixed_a["maxLength"] = 0
    return {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "has(self.mode) == has(oldSelf.mode)", "message": "mode is fixed"},
            {
                "rule": "!has(self.replicas) || self.replicas <= self.max",
                "messageExpression": "'replicas ' + string(self.replicas) + ' over max'",
            },
        ],
        "properties": {
            "mode": {"type": "string", "enum": ["a", "b"]},
            "replicas": {"type": "integer", "minimum": 0},
            "max": {"type": "integer", "default": 10},
            "ref": {
                "type": "object",
                "required": ["kind"],
                "x-kubernetes-validations": [
                    {"rule": "self.group == oldSelf.group", "message": "group fixed"}
                ],
                "properties": {
                    "group": {"type": "string"},
                    "kind": {
                        "type": "string",
                        "x-kubernetes-validations": [{"rule": "self != ''"}],
                    },
                },
            },
            "items": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "x-kubernetes-validations": [
                    {"rule": "self.all(i, i.value < 100)", "message": "values under 100"}
                ],
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string"},
                        "value": {
                            "type": "integer",
                            "x-kubernetes-validations": [
                                {"rule": "self >= oldSelf", "message": "no shrink"},
                                {
                                    "rule": "self != 13",
                                    "fieldPath": "",
                                    "reason": "FieldValueForbidden",
                                },
                            ],
                        },
                    },
                },
            },
            "tags": {
                "type": "array",
                "x-kubernetes-list-type": "set",
                "items": {
                    "type": "string",
                    "x-kubernetes-validations": [
                        {"rule": f"self.size() < {tag_limit}", "message": "tag too long"}
                    ],
                },
            },
            "size": {
                "type": "integer",
                "x-kubernetes-validations": [
                    {
                        "rule": "!oldSelf.hasValue() || self >= oldSelf.value()",
                        "optionalOldSelf": True,
                        "messageExpression": "'size ' + string(self) + ' under ' + "
                        "string(oldSelf.value())",
                    }
                ],
            },
            "fixed": {
                "type": "object",
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "fixed"}],
                "properties": {"a": fixed_a, "b": {"type": "integer"}},
            },
            "when": {
                "type": "string",
                "format": "date-time",
                "x-kubernetes-validations": [
                    {"rule": "self > timestamp('2026-01-01T00:00:00Z')", "message": "too early"}
                ],
            },
        },
    }


def _crd(tag_limit: int) -> JsonObject:
    schema = {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.metadata.name.size() <= 12", "message": "name too long"}
        ],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": _spec_schema(tag_limit),
            "status": {
                "type": "object",
                "properties": {
                    "count": {"type": "integer", "minimum": 0},
                    "phase": {"type": "string"},
                },
            },
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def _widget(name: str, **spec: Any) -> JsonObject:
    base: JsonObject = {
        "mode": "a",
        "replicas": 2,
        "ref": {"group": "g", "kind": "K"},
        "items": [{"name": "x", "value": 1}, {"name": "y", "value": 2}],
        "tags": ["t1", "t2"],
        "size": 3,
        "fixed": {"a": "s", "b": 1},
        "when": "2026-06-01T00:00:00Z",
    }
    base.update(spec)
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {k: v for k, v in base.items() if v is not None},
    }


Write = tuple[str, str, Any]  # (verb, name, body): create, patch, status, crd


def _writes() -> list[Write]:
    writes: list[Write] = [
        ("create", "w1", _widget("w1")),
        ("create", "w2", _widget("w2", replicas=20)),
        ("create", "a-very-long-name", _widget("a-very-long-name")),
        ("create", "w3", _widget("w3", mode="c", replicas=-1)),
        ("create", "w4", _widget("w4", items=[{"name": "x", "value": 200}, {"value": 1}])),
        ("create", "w5", _widget("w5", items=[{"name": "x", "value": 13}], tags=["t", "t"])),
        ("create", "w6", _widget("w6", when="2025-01-01T00:00:00Z", ref={"group": "g"})),
        ("create", "w7", _widget("w7", tags=["toolong"])),
        ("patch", "w1", {"metadata": {"annotations": {"a": "1"}}}),
        ("status", "w1", {"status": {"count": 1, "phase": "Up"}}),
        ("status", "w1", {"status": {"count": -1}}),
        ("patch", "w1", {"spec": {"mode": None}}),
        ("patch", "w1", {"spec": {"replicas": 11}}),
        ("patch", "w1", {"spec": {"ref": {"group": "h"}}}),
        (
            "patch",
            "w1",
            {"spec": {"items": [{"name": "y", "value": 1}, {"name": "x", "value": 5}]}},
        ),
        (
            "patch",
            "w1",
            {"spec": {"items": [{"name": "y", "value": 3}, {"name": "x", "value": 1}]}},
        ),
        ("patch", "w1", {"spec": {"size": 2}}),
        ("patch", "w1", {"spec": {"size": 4}}),
        ("patch", "w1", {"spec": {"fixed": {"b": 2}}}),
        ("patch", "w1", {"spec": {"fixed": {"b": 1}, "replicas": 3}}),
        ("patch", "w1", {"spec": {"unknown": 1, "tags": ["t3"]}}),
        # A stricter rule on tags and a stricter schema for fixed.a: stored values fail them.
        ("crd", "", _crd(2)),
        ("patch", "w1", {"metadata": {"annotations": {"a": "2"}}}),
        ("status", "w1", {"status": {"count": 2}}),
        ("patch", "w1", {"spec": {"tags": ["t3", "t4"]}}),
        ("patch", "w1", {"spec": {"tags": ["u"], "replicas": 4}}),
        ("create", "w8", _widget("w8")),
        ("create", "w9", _widget("w9", tags=["u"])),
        ("patch", "w9", {"spec": {"size": 1, "replicas": 50}}),
        ("status", "w9", {"status": {"count": 3}}),
    ]
    # The same writes again, to other objects where they create: outcomes seen before.
    again = [
        (verb, f"{name}-b" if verb == "create" and len(name) < 5 else name, body)
        for verb, name, body in writes
        if verb != "crd"
    ]
    for verb, name, body in again:
        if verb == "create":
            body = {**body, "metadata": {**body["metadata"], "name": name}}
        writes.append((verb, name, body))
    return writes


_REF = {"group": "karpenter.cluster.x-k8s.io", "kind": "ClusterAPINodeClass", "name": "c"}
_ARCH = {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}


def _nodepool() -> JsonObject:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "catalog"},
        "spec": {
            "template": {"spec": {"nodeClassRef": _REF, "requirements": [_ARCH]}},
            "disruption": {"consolidateAfter": "30s", "budgets": [{"nodes": "10%"}]},
        },
    }


def _nodeclaim() -> JsonObject:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "claim", "labels": {"karpenter.sh/nodepool": "catalog"}},
        "spec": {
            "requirements": [
                _ARCH,
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["catalog"]},
            ],
            "resources": {"requests": {"cpu": "8", "pods": "8"}},
            "nodeClassRef": _REF,
        },
    }


def _pool_status(n: int) -> JsonObject:
    return {"status": {"nodes": n, "resources": {"cpu": str(n), "nodes": str(n)}}}


def _claim_status(n: int) -> JsonObject:
    condition = {
        "type": "Launched",
        "status": "True",
        "reason": "Launched",
        "message": "",
        "lastTransitionTime": f"2026-01-01T00:00:0{n}Z",
    }
    return {"status": {"conditions": [condition], "providerID": f"sim://{n}"}}


def _karpenter_writes(server: InMemoryAPIServer) -> list[Any]:
    """NodePool and NodeClaim writes: their transition rules, immutable spec, root rules."""
    out: list[Any] = []

    def attempt(action: Any) -> None:
        warnings: list[str] = []
        try:
            result = action(warnings)
            out.append({"stored": {k: result.get(k) for k in ("spec", "status")}})
        except ApiError as error:
            out.append({"code": error.code, "message": str(error)})
        out[-1]["warnings"] = warnings

    pool, claim = _nodepool(), _nodeclaim()
    attempt(lambda w: server.create(NODEPOOLS, pool, warnings=w))
    attempt(lambda w: server.create(NODECLAIMS, claim, warnings=w))
    for attempt_no in range(3):
        attempt(
            lambda w, n=attempt_no: server.patch(
                NODEPOOLS, "catalog", _pool_status(n), subresource="status", warnings=w
            )
        )
        attempt(
            lambda w, n=attempt_no: server.patch(
                NODECLAIMS, "claim", _claim_status(n), subresource="status", warnings=w
            )
        )
        attempt(
            lambda w, n=attempt_no: server.patch(
                NODECLAIMS, "claim", {"metadata": {"annotations": {"a": str(n)}}}, warnings=w
            )
        )
        attempt(
            lambda w: server.patch(NODECLAIMS, "claim", {"spec": {"expireAfter": "1h"}}, warnings=w)
        )
        attempt(
            lambda w: server.patch(
                NODEPOOLS,
                "catalog",
                {"spec": {"replicas": 3, "template": {"spec": {"nodeClassRef": {"kind": "X"}}}}},
                warnings=w,
            )
        )
        attempt(
            lambda w: server.patch(
                NODEPOOLS,
                "catalog",
                {
                    "spec": {
                        "disruption": {"consolidateAfter": "forever", "budgets": [{"nodes": "x"}]}
                    }
                },
                warnings=w,
            )
        )
        long_name = {**claim, "metadata": {**claim["metadata"], "name": "n" * (70 + attempt_no)}}
        attempt(lambda w, body=long_name: server.create(NODECLAIMS, body, warnings=w))
    return out


def run_writes() -> list[Any]:
    server = InMemoryAPIServer(random_seed=1)
    server.apply_manifests(generate_crds())
    server.apply_manifests([_crd(10)])
    out: list[Any] = []
    for verb, name, body in _writes():
        warnings: list[str] = []
        try:
            if verb == "crd":
                server.apply_manifests([body])
                continue
            if verb == "create":
                result = server.create(WIDGETS, body, warnings=warnings)
            else:
                subresource = "status" if verb == "status" else None
                result = server.patch(
                    WIDGETS, name, body, "default", subresource=subresource, warnings=warnings
                )
            out.append({"stored": {k: result.get(k) for k in ("spec", "status")}})
        except ApiError as error:
            out.append({"code": error.code, "message": str(error)})
        out[-1]["warnings"] = warnings
    return out + _karpenter_writes(server)


def test_each_write_has_the_recorded_outcome() -> None:
    expected = json.loads(_EXPECTED.read_text())
    got = run_writes()
    assert len(got) == len(expected)
    for index, (outcome, recorded) in enumerate(zip(got, expected, strict=True)):
        assert outcome == recorded, f"write {index}"


def test_the_recording_holds_refusals_warnings_and_remembered_outcomes() -> None:
    expected = json.loads(_EXPECTED.read_text())
    messages = [o.get("message", "") for o in expected]
    assert sum(1 for o in expected if "code" in o) >= 20
    assert any(o["warnings"] for o in expected)
    for text in (
        "mode is fixed",
        "replicas 11 over max",
        "group fixed",
        "no shrink",
        "failed rule: !oldSelf.hasValue()",
        "spec is immutable",
        "fixed",
        "tag too long",
        "name too long",
        "Duplicate value",
        "Forbidden",
    ):
        assert any(text in m for m in messages), text


if __name__ == "__main__":  # records the expected outcomes: run against the reference tree
    _EXPECTED.write_text(json.dumps(run_writes(), indent=1, sort_keys=True) + "\n")
