"""CRDs generated from the models: committed files do not drift, schemas are structural,
admit the upstream examples, refuse what the models refuse, and default like the models."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from karpenter_capi.core.api.crds import crd_files, crds_yaml, generate_crds, write_crds
from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool, nodepool_json

from .examples import NODECLAIM_YAML, NODECLASS_YAML, NODEPOOL_YAML, load
from .schema_check import apply_defaults, validate, walk

DEPLOY_CRDS = Path(__file__).resolve().parents[3] / "deploy" / "crds"


def _schema(kind: str) -> dict[str, Any]:
    crd = next(c for c in generate_crds() if c["spec"]["names"]["kind"] == kind)
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crds_match_the_models() -> None:
    expected = crd_files()
    committed = {path.name: path.read_text(encoding="utf-8") for path in DEPLOY_CRDS.glob("*.yaml")}
    assert sorted(committed) == sorted(expected), "CRD files differ; regenerate with `make crds`"
    for name, text in expected.items():
        assert committed[name] == text, f"deploy/crds/{name} is stale; regenerate with `make crds`"


def test_generation_is_deterministic_and_yaml_matches() -> None:
    crds = generate_crds()
    assert crds == generate_crds()
    assert list(yaml.safe_load_all(crds_yaml())) == crds
    assert [c["metadata"]["name"] for c in crds] == [
        "clusterapinodeclasses.karpenter.cluster.x-k8s.io",
        "nodeclaims.karpenter.sh",
        "nodepools.karpenter.sh",
    ]


def test_write_crds_splits_one_file_per_crd(tmp_path: Path) -> None:
    paths = write_crds(tmp_path / "out")
    assert [p.name for p in paths] == [
        "karpenter.cluster.x-k8s.io_clusterapinodeclasses.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.sh_nodepools.yaml",
    ]
    assert [yaml.safe_load(p.read_text()) for p in paths] == generate_crds()


def test_names_scope_columns_and_subresources_follow_upstream() -> None:
    by_kind = {c["spec"]["names"]["kind"]: c for c in generate_crds()}
    for kind, crd in by_kind.items():
        assert crd["spec"]["scope"] == "Cluster", kind
        assert crd["spec"]["names"]["categories"] == ["karpenter"]
        version = crd["spec"]["versions"][0]
        scale = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"}
        expected = {"status": {}, "scale": scale} if kind == "NodePool" else {"status": {}}
        assert version["subresources"] == expected, kind
        assert version["served"]
        assert version["storage"]
    assert by_kind["ClusterAPINodeClass"]["spec"]["names"]["shortNames"] == ["capinc", "capincs"]
    assert "shortNames" not in by_kind["NodePool"]["spec"]["names"]

    def columns(kind: str) -> list[tuple[str, bool]]:
        cols = by_kind[kind]["spec"]["versions"][0]["additionalPrinterColumns"]
        return [(c["name"], c.get("priority") == 1) for c in cols]

    assert columns("NodePool") == [
        ("NodeClass", False), ("Nodes", False), ("Ready", False), ("Age", False),
        ("Weight", True), ("CPU", True), ("Memory", True),
    ]  # fmt: skip
    assert columns("NodeClaim") == [
        ("Type", False), ("Capacity", False), ("Zone", False), ("Node", False), ("Ready", False),
        ("Age", False), ("ImageID", True), ("ID", True), ("NodePool", True), ("NodeClass", True),
        ("Drifted", True),
    ]  # fmt: skip


@pytest.mark.parametrize("kind", ["NodePool", "NodeClaim", "ClusterAPINodeClass"])
def test_schema_is_structural(kind: str) -> None:
    for path, node in walk(_schema(kind)):
        assert not {"$ref", "$defs", "allOf", "oneOf"} & node.keys(), path
        assert "title" not in node, path
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert "anyOf" not in node, path
        assert node.get("type") in {"object", "array", "string", "integer", "boolean"}, path
        if "properties" in node:
            assert node["type"] == "object", path
            assert "additionalProperties" not in node, path
        if node["type"] == "array":
            assert "items" in node, path
        for required in node.get("required", []):
            assert required in node.get("properties", {}), f"{path}.{required}"


def test_metadata_is_left_to_the_api_server() -> None:
    for kind in ("NodePool", "NodeClaim", "ClusterAPINodeClass"):
        assert _schema(kind)["properties"]["metadata"] == {"type": "object"}
    assert _schema("NodePool")["required"] == ["spec"]
    assert _schema("NodeClaim")["required"] == ["spec"]
    # Like upstream, a ClusterAPINodeClass without a spec selects everything it may.
    assert "required" not in _schema("ClusterAPINodeClass")


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("NodePool", NODEPOOL_YAML),
        ("NodeClaim", NODECLAIM_YAML),
        ("ClusterAPINodeClass", NODECLASS_YAML),
    ],
)
def test_upstream_examples_are_admitted(kind: str, text: str) -> None:
    assert validate(_schema(kind), load(text)) == []


@pytest.mark.parametrize(
    ("path", "value", "fragment"),
    [
        (("spec", "weight"), 0, "below minimum 1"),
        (("spec", "weight"), 101, "above maximum 100"),
        (("spec", "disruption", "consolidationPolicy"), "WhenUnderutilized", "not in"),
        (("spec", "disruption", "consolidateAfter"), "soon", "does not match"),
        (("spec", "template", "spec", "terminationGracePeriod"), "Never", "does not match"),
        (("spec", "limits", "cpu"), "lots", "does not match"),
        (("spec", "template", "spec", "taints"), [{"key": "a", "effect": "Nope"}], "not in"),
    ],
)
def test_schema_refuses_what_the_model_refuses(
    path: tuple[str, ...], value: Any, fragment: str
) -> None:
    raw = load(NODEPOOL_YAML)
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    problems = validate(_schema("NodePool"), raw)
    assert any(fragment in p for p in problems), problems
    with pytest.raises(ValidationError):
        NodePool.model_validate(raw)


def test_requirement_bounds_are_in_the_schema() -> None:
    raw = load(NODEPOOL_YAML)
    requirement = raw["spec"]["template"]["spec"]["requirements"][0]
    requirement["minValues"] = 51
    requirement["operator"] = "Like"
    raw["spec"]["template"]["spec"]["requirements"] += [
        {"key": f"k{i}", "operator": "Exists"} for i in range(100)
    ]
    problems = validate(_schema("NodePool"), raw)
    assert any("minValues: above maximum 50" in p for p in problems)
    assert any("operator: 'Like' not in" in p for p in problems)
    assert any("more than 100 items" in p for p in problems)


def test_api_server_defaults_equal_model_defaults() -> None:
    minimal = nodepool_json(
        "np", requirements=[{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]
    )
    minimal["spec"]["disruption"] = {"consolidateAfter": "5m", "budgets": [{"reasons": ["Empty"]}]}
    for raw in (
        minimal,
        {**minimal, "spec": {k: v for k, v in minimal["spec"].items() if k != "disruption"}},
    ):
        defaulted = apply_defaults(_schema("NodePool"), copy.deepcopy(raw))
        assert defaulted == NodePool.model_validate(raw).model_dump(exclude_none=True)
    claim = load(NODECLAIM_YAML)
    del claim["spec"]["expireAfter"]
    assert apply_defaults(_schema("NodeClaim"), claim) == NodeClaim.model_validate(
        claim
    ).model_dump(exclude_none=True)
    nodeclass = load(NODECLASS_YAML)
    assert apply_defaults(_schema("ClusterAPINodeClass"), nodeclass) == (
        ClusterAPINodeClass.model_validate(nodeclass).model_dump(exclude_none=True)
    )


def _kubectl(kubectl: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # HOME is private so kubectl's discovery cache never leaks between runs or into ~/.kube.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    return subprocess.run(
        [kubectl, "--kubeconfig", str(home / "kubeconfig"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.kubectl
def test_kubectl_installs_crds_and_prints_upstream_columns(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH")
    # Even `kubectl create --dry-run=client` needs API discovery, so kubectl talks to the
    # simulator's HTTP front on 127.0.0.1.
    try:
        from karpenter_capi.sim.apiserver import InMemoryAPIServer
        from karpenter_capi.sim.apiserver.http import HttpFront
        from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig
    except ImportError as err:
        pytest.skip(f"the simulated API server is unavailable: {err}")

    manifest = tmp_path / "nodepool.yaml"
    nodepool = load(NODEPOOL_YAML)
    del nodepool["status"]
    manifest.write_text(yaml.safe_dump(nodepool), encoding="utf-8")
    crds = str(DEPLOY_CRDS)
    with HttpFront(InMemoryAPIServer(), host="127.0.0.1", port=0) as front:
        write_kubeconfig(front.url, tmp_path / "kubeconfig")
        dry = _kubectl(kubectl, tmp_path, "create", "--dry-run=client", "-o", "yaml", "-f", crds)
        assert dry.returncode == 0, dry.stderr
        assert "nodepools.karpenter.sh" in dry.stdout
        applied = _kubectl(kubectl, tmp_path, "apply", "-f", crds)
        assert applied.returncode == 0, applied.stderr
        created = _kubectl(kubectl, tmp_path, "apply", "-f", str(manifest))
        assert created.returncode == 0, created.stderr
        table = _kubectl(kubectl, tmp_path, "get", "nodepools", "-o", "wide")
        assert table.returncode == 0, table.stderr
        header, row = table.stdout.splitlines()[:2]
        assert header.split() == [
            "NAME", "NODECLASS", "NODES", "READY", "AGE", "WEIGHT", "CPU", "MEMORY",
        ]  # fmt: skip
        assert row.split()[:2] == ["default", "default"]
