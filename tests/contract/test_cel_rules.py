"""Contract: CRD validation rules (``x-kubernetes-validations``) are enforced as kube enforces them.

Every test runs in process and through the official client over HTTP (the ``kube`` fixture),
and asserts what a client sees: the 422's message and its ``details.causes``.
"""

from __future__ import annotations

import copy
import http.client
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.kube.client import KubeClient, PatchType
from karpenter_capi.core.kube.errors import Invalid
from karpenter_capi.core.kube.resources import CUSTOM_RESOURCE_DEFINITIONS, Resource
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront

GADGETS = Resource("example.com", "v1", "gadgets", "Gadget", True)
NODEPOOLS = Resource("karpenter.sh", "v1", "nodepools", "NodePool", False)
NODECLAIMS = Resource("karpenter.sh", "v1", "nodeclaims", "NodeClaim", False)

_SPEC: dict[str, Any] = {
    "type": "object",
    "properties": {
        "owner": {
            "type": "string",
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "owner is immutable"},
                {
                    "rule": "!self.find('^([^/]+)').endsWith('example.com')",
                    "message": 'owner domain "example.com" is restricted',
                },
            ],
        },
        "replicas": {"type": "integer"},
        "limits": {"type": "object", "additionalProperties": {"type": "string"}},
        "ports": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                "x-kubernetes-validations": [
                    {
                        "rule": "self.port > 1024",
                        "messageExpression": "'port ' + string(self.port) + ' is privileged'",
                        "fieldPath": ".port",
                    }
                ],
            },
        },
    },
    "x-kubernetes-validations": [
        {
            "rule": "!has(self.replicas) || 'nodes' in self.limits",
            "message": "replicas need limits.nodes",
            "reason": "FieldValueForbidden",
        }
    ],
}


def _crd(spec_schema: dict[str, Any] | None = None, **root: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": _SPEC if spec_schema is None else spec_schema,
            "status": {
                "type": "object",
                "properties": {"phase": {"type": "string"}},
                "x-kubernetes-validations": [
                    {"rule": "self.phase != 'Lost'", "message": "phases are never lost"}
                ],
            },
        },
        **root,
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "kind": "Gadget"},
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


def _gadget(name: str = "g", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


@pytest.fixture
def gadgets(kube: KubeClient) -> KubeClient:
    kube.create(CUSTOM_RESOURCE_DEFINITIONS, _crd())
    return kube


def _causes(error: Invalid) -> list[tuple[str, str, str]]:
    return [(c["field"], c["reason"], c["message"]) for c in error.details["causes"]]


def test_a_broken_rule_is_422_with_kubes_message_and_causes(gadgets: KubeClient) -> None:
    with pytest.raises(Invalid) as raised:
        gadgets.create(GADGETS, _gadget(owner="team.example.com/web", replicas=2, limits={}))
    error = raised.value
    assert error.code == 422
    assert error.message == (
        'Gadget.example.com "g" is invalid: ['
        "spec: Forbidden: replicas need limits.nodes, "
        'spec.owner: Invalid value: "string": owner domain "example.com" is restricted]'
    )
    assert _causes(error) == [
        ("spec", "FieldValueForbidden", "Forbidden: replicas need limits.nodes"),
        (
            "spec.owner",
            "FieldValueInvalid",
            'Invalid value: "string": owner domain "example.com" is restricted',
        ),
    ]
    assert gadgets.list(GADGETS, "default").items == []


def test_message_expression_and_field_path_shape_the_cause(gadgets: KubeClient) -> None:
    with pytest.raises(Invalid) as raised:
        gadgets.create(GADGETS, _gadget(ports=[{"name": "http", "port": 80}]))
    assert _causes(raised.value) == [
        (
            "spec.ports[0].port",
            "FieldValueInvalid",
            'Invalid value: "object": port 80 is privileged',
        )
    ]


def test_transition_rules_guard_updates_and_patches(gadgets: KubeClient) -> None:
    created = gadgets.create(GADGETS, _gadget(owner="team-a"))
    with pytest.raises(Invalid) as raised:
        gadgets.patch(GADGETS, "g", {"spec": {"owner": "team-b"}}, "default")
    assert raised.value.message == (
        'Gadget.example.com "g" is invalid: spec.owner: Invalid value: "string": owner is immutable'
    )
    replaced = copy.deepcopy(created)
    replaced["spec"]["owner"] = "team-c"
    with pytest.raises(Invalid, match="owner is immutable"):
        gadgets.update(GADGETS, replaced)
    with pytest.raises(Invalid, match="owner is immutable"):
        gadgets.patch(
            GADGETS,
            "g",
            [{"op": "replace", "path": "/spec/owner", "value": "team-d"}],
            "default",
            patch_type=PatchType.JSON,
        )
    # Other fields still change, and the owner may be set where it was absent.
    gadgets.patch(GADGETS, "g", {"spec": {"ports": [{"name": "h", "port": 8080}]}}, "default")
    gadgets.create(GADGETS, _gadget("h"))
    assert gadgets.patch(GADGETS, "h", {"spec": {"owner": "x"}}, "default")["spec"]["owner"] == "x"


def test_status_writes_run_the_rules_too(gadgets: KubeClient) -> None:
    gadgets.create(GADGETS, _gadget(owner="team-a"))
    ok = gadgets.patch(GADGETS, "g", {"status": {"phase": "Up"}}, "default", subresource="status")
    assert ok["status"] == {"phase": "Up"}
    with pytest.raises(Invalid) as raised:
        gadgets.patch(GADGETS, "g", {"status": {"phase": "Lost"}}, "default", subresource="status")
    assert _causes(raised.value) == [
        ("status", "FieldValueInvalid", 'Invalid value: "object": phases are never lost')
    ]


def test_schema_errors_that_block_rules_say_so(gadgets: KubeClient) -> None:
    with pytest.raises(Invalid) as raised:
        gadgets.create(GADGETS, _gadget(replicas="two", owner="x.example.com"))
    assert _causes(raised.value) == [
        (
            "spec.replicas",
            "FieldValueTypeInvalid",
            'Invalid value: "string": spec.replicas in body must be of type integer: "string"',
        ),
        (
            "<nil>",
            "FieldValueInvalid",
            'Invalid value: "null": some validation rules were not checked because the object '
            "was invalid; correct the existing errors to complete validation",
        ),
    ]


def test_an_unchanged_invalid_value_ratchets_after_the_crd_tightens(kube: KubeClient) -> None:
    loose = _crd({"type": "object", "properties": {"size": {"type": "integer"}}})
    crd = kube.create(CUSTOM_RESOURCE_DEFINITIONS, loose)
    kube.create(GADGETS, _gadget(size=50))
    tight = copy.deepcopy(crd)
    tight["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = {
        "type": "object",
        "properties": {
            "size": {"type": "integer", "maximum": 10},
            "note": {"type": "string"},
        },
        "x-kubernetes-validations": [{"rule": "self.size < 10", "message": "size below 10"}],
    }
    kube.update(CUSTOM_RESOURCE_DEFINITIONS, tight)
    # The old, now invalid size is tolerated while it does not change...
    assert kube.patch(GADGETS, "g", {"metadata": {"labels": {"a": "b"}}}, "default")
    with pytest.raises(Invalid) as raised:
        kube.patch(GADGETS, "g", {"spec": {"note": "hi"}}, "default")
    # ...the spec changed, so its rule is checked again; the unchanged size is still ratcheted.
    assert _causes(raised.value) == [
        ("spec", "FieldValueInvalid", 'Invalid value: "object": size below 10')
    ]
    with pytest.raises(Invalid, match=r"spec\.size in body should be less than or equal to 10"):
        kube.patch(GADGETS, "g", {"spec": {"size": 40}}, "default")


# ------------------------------------------------------------------------------ CRD writes


@pytest.mark.parametrize(
    ("rule", "field", "detail"),
    [
        (
            {"rule": "self.size >"},
            "x-kubernetes-validations[0].rule",
            "compilation failed: ERROR: <input>:1:12:",
        ),
        (
            {"rule": "self.size > 1", "reason": "FieldValueWrong"},
            "x-kubernetes-validations[0].reason",
            'Unsupported value: "FieldValueWrong"',
        ),
        (
            {"rule": "self.size > 1", "fieldPath": ".nothing"},
            "x-kubernetes-validations[0].fieldPath",
            "fieldPath must be a valid path",
        ),
        (
            {"rule": "self.size > 1", "optionalOldSelf": True},
            "x-kubernetes-validations[0].optionalOldSelf",
            "may not be set if oldSelf is not used in rule",
        ),
        (
            {"rule": "self.size > 1", "messageExpression": "'a' +"},
            "x-kubernetes-validations[0].messageExpression",
            "messageExpression compilation failed",
        ),
    ],
)
def test_crds_with_broken_rules_are_refused(
    kube: KubeClient, rule: dict[str, Any], field: str, detail: str
) -> None:
    spec = {
        "type": "object",
        "properties": {"size": {"type": "integer"}},
        "x-kubernetes-validations": [rule],
    }
    with pytest.raises(Invalid) as raised:
        kube.create(CUSTOM_RESOURCE_DEFINITIONS, _crd(spec))
    [(where, _, message)] = _causes(raised.value)
    assert where == f"spec.versions[0].schema.openAPIV3Schema.properties[spec].{field}"
    assert detail in message


def test_transition_rules_below_uncorrelatable_lists_are_refused(kube: KubeClient) -> None:
    spec = {
        "type": "object",
        "properties": {
            "tags": {
                "type": "array",
                "x-kubernetes-list-type": "set",
                "items": {
                    "type": "string",
                    "x-kubernetes-validations": [{"rule": "self == oldSelf"}],
                },
            }
        },
    }
    with pytest.raises(Invalid) as raised:
        kube.create(CUSTOM_RESOURCE_DEFINITIONS, _crd(spec))
    base = "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[tags].items"
    assert _causes(raised.value) == [
        (
            f"{base}.x-kubernetes-validations[0].rule",
            "FieldValueInvalid",
            'Invalid value: "self == oldSelf": oldSelf cannot be used on the uncorrelatable '
            f"portion of the schema within {base}",
        )
    ]


# ------------------------------------------------------------------ Karpenter's own CRDs


def _install(kube: KubeClient, crds: list[dict[str, Any]]) -> None:
    for crd in crds:
        kube.create(CUSTOM_RESOURCE_DEFINITIONS, crd)


def _nodepool(name: str = "default", **template_spec: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeClassRef": {
            "group": "karpenter.cluster.x-k8s.io",
            "kind": "ClusterAPINodeClass",
            "name": "default",
        },
        "requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
        ],
        **template_spec,
    }
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"spec": spec}},
    }


def test_shipped_crds_enforce_their_rules(kube: KubeClient) -> None:
    _install(kube, generate_crds())
    requirement = {"key": "karpenter.sh/custom", "operator": "In", "values": ["x"]}
    with pytest.raises(Invalid, match=r'label domain "karpenter\.sh" is restricted'):
        kube.create(NODEPOOLS, _nodepool(requirements=[requirement]))
    gt = {"key": "example.com/generation", "operator": "Gt", "values": ["new"]}
    with pytest.raises(Invalid, match="evaluating rule: requirements operator 'Gt'"):
        kube.create(NODEPOOLS, _nodepool(requirements=[gt]))
    pool = kube.create(NODEPOOLS, _nodepool())
    assert pool["spec"]["template"]["spec"]["requirements"][0]["key"] == (
        "karpenter.sh/capacity-type"
    )


def test_shipped_nodeclaim_spec_is_immutable_but_status_is_not(kube: KubeClient) -> None:
    _install(kube, generate_crds())
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "c"},
        "spec": copy.deepcopy(_nodepool()["spec"]["template"]["spec"]),
    }
    kube.create(NODECLAIMS, claim)
    done = kube.patch(NODECLAIMS, "c", {"status": {"providerID": "p-1"}}, subresource="status")
    assert done["status"]["providerID"] == "p-1"
    with pytest.raises(Invalid) as raised:
        kube.patch(NODECLAIMS, "c", {"spec": {"expireAfter": "1h"}})
    assert _causes(raised.value) == [
        ("spec", "FieldValueInvalid", 'Invalid value: "object": spec is immutable')
    ]


_UPSTREAM = Path("/work/.mirror/kubernetes-sigs+karpenter/repo")


def _upstream_crd(name: str) -> dict[str, Any]:
    if not _UPSTREAM.is_dir():
        pytest.skip("upstream Karpenter mirror not available")
    shown = subprocess.run(
        ["git", "-C", str(_UPSTREAM), "show", f"HEAD:pkg/apis/crds/{name}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode != 0:
        pytest.skip(f"{name} not in the upstream mirror")
    crd: dict[str, Any] = yaml.safe_load(shown.stdout)
    return crd


def test_upstream_nodepool_crd_rules_accept_and_refuse_like_a_cluster(kube: KubeClient) -> None:
    _install(kube, [_upstream_crd("karpenter.sh_nodepools.yaml")])
    restricted = {"key": "karpenter.sh/team", "operator": "In", "values": ["a"]}
    with pytest.raises(Invalid) as raised:
        kube.create(NODEPOOLS, _nodepool(requirements=[restricted]))
    assert (
        "spec.template.spec.requirements[0].key",
        "FieldValueInvalid",
        'Invalid value: "string": label domain "karpenter.sh" is restricted',
    ) in _causes(raised.value)

    kube.create(NODEPOOLS, _nodepool())
    with pytest.raises(Invalid) as raised:
        kube.patch(NODEPOOLS, "default", {"spec": {"replicas": 2}})
    assert _causes(raised.value) == [
        (
            "spec",
            "FieldValueInvalid",
            'Invalid value: "object": Cannot transition NodePool between static (replicas set) '
            "and dynamic (replicas unset) provisioning modes",
        )
    ]
    group_change = {"spec": {"template": {"spec": {"nodeClassRef": {"group": "other.io"}}}}}
    with pytest.raises(Invalid, match=r"nodeClassRef\.group is immutable"):
        kube.patch(NODEPOOLS, "default", group_change)

    static = _nodepool("static")
    static["spec"].update({"replicas": 3, "limits": {"cpu": "10"}})
    with pytest.raises(Invalid, match=r"only 'limits\.nodes' is supported on static NodePools"):
        kube.create(NODEPOOLS, static)
    static["spec"]["limits"] = {"nodes": "5"}
    created = kube.create(NODEPOOLS, static)
    assert created["spec"]["replicas"] == 3
    assert kube.patch(NODEPOOLS, "static", {"spec": {"replicas": 4}})["spec"]["replicas"] == 4


def test_over_http_the_422_is_a_status_and_ratcheted_failures_are_warnings(
    apiserver: InMemoryAPIServer,
) -> None:
    crd = apiserver.create(CUSTOM_RESOURCE_DEFINITIONS, _crd())
    apiserver.create(GADGETS, _gadget(owner="web.example.org"))
    tightened = copy.deepcopy(crd)
    owner = tightened["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    owner["properties"]["owner"]["x-kubernetes-validations"].append(
        {"rule": "!self.endsWith('.org')", "message": "no .org owners"}
    )
    apiserver.update(CUSTOM_RESOURCE_DEFINITIONS, tightened)
    path = "/apis/example.com/v1/namespaces/default/gadgets/g"
    headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
    with HttpFront(apiserver, host="127.0.0.1", port=0) as front:
        conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
        try:
            conn.request("PATCH", path, json.dumps({"spec": {"replicas": None}}), headers)
            response = conn.getresponse()
            response.read()
            assert response.status == 200
            assert response.headers.get_all("Warning") == [
                '299 - "spec.owner: Invalid value: \\"string\\": no .org owners"'
            ]
            patch = {"spec": {"owner": "api.example.org"}}
            conn.request("PATCH", path, json.dumps(patch), headers)
            response = conn.getresponse()
            status = json.loads(response.read())
        finally:
            conn.close()
    assert response.status == 422
    assert status["kind"] == "Status"
    assert status["reason"] == "Invalid"
    assert status["message"] == (
        'Gadget.example.com "g" is invalid: [spec.owner: Invalid value: "string": owner is '
        'immutable, spec.owner: Invalid value: "string": no .org owners]'
    )
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "string": owner is immutable',
            "field": "spec.owner",
        },
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "string": no .org owners',
            "field": "spec.owner",
        },
    ]
