"""How often our NodePool/NodeClaim CRDs give the same outcome as upstream Karpenter's (issue 14).

Why: "drop-in" is a claim to measure, not to assume. The cases of
``tests/core/api/upstream_cel_cases.py`` (upstream's own CEL validation tests, restated) and every
NodePool in aws/karpenter-provider-aws ``examples/v1/`` are created twice, in two in-memory API
servers (which evaluate CEL rules with a real CEL evaluator): one with our generated CRDs, one
with upstream's CRDs. An outcome is "admitted with this stored spec" or "refused"; the figures
are how many agree. Examples have their ``nodeClassRef`` pointed at a ClusterAPINodeClass on our
side, as a user moving over would do, and the comparison ignores that field.

Upstream's files are not part of this repository: point the script at a checkout.

    .venv/bin/python benchmarks/api_parity.py --karpenter ~/src/karpenter \\
        --aws ~/src/karpenter-provider-aws [--ours OLD/deploy/crds] [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.kube.errors import Invalid
from karpenter_capi.core.kube.resources import NODECLAIMS, NODEPOOLS, Resource
from karpenter_capi.sim.apiserver import InMemoryAPIServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests.*
from tests.core.api.upstream_cel_cases import (
    NODECLAIM_CASES,
    NODECLAIM_UPDATES,
    NODEPOOL_CASES,
    NODEPOOL_UPDATES,
    base_nodeclaim,
    base_nodepool,
)

JsonObject = dict[str, Any]
Outcome = tuple[bool, Any]
_OURS_REF = {
    "group": "karpenter.cluster.x-k8s.io",
    "kind": "ClusterAPINodeClass",
    "name": "default",
}


def _server(crds: list[JsonObject]) -> InMemoryAPIServer:
    server = InMemoryAPIServer()
    server.apply_manifests(crds)
    return server


def _outcome(server: InMemoryAPIServer, resource: Resource, obj: JsonObject) -> Outcome:
    try:
        stored = server.create(resource, copy.deepcopy(obj))
    except Invalid as err:
        return False, str(err)
    spec = copy.deepcopy(stored["spec"])
    spec.get("template", {}).get("spec", {}).pop("nodeClassRef", None)
    return True, spec


def _update_outcome(
    server: InMemoryAPIServer, resource: Resource, obj: JsonObject, create: Any, update: Any
) -> bool:
    create(obj)
    stored = server.create(resource, obj)
    changed = copy.deepcopy(stored)
    update(changed)
    try:
        server.update(resource, changed)
    except Invalid:
        return False
    return True


def _examples(aws: Path) -> list[tuple[str, JsonObject]]:
    found = []
    for path in sorted((aws / "examples" / "v1").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "NodePool":
                found.append((f"{path.name}:{doc['metadata']['name']}", doc))
    return found


def measure(karpenter: Path, aws: Path, ours_dir: Path | None = None) -> dict[str, Any]:
    crd_dir = karpenter / "pkg" / "apis" / "crds"
    upstream_crds = [
        yaml.safe_load((crd_dir / name).read_text())
        for name in ("karpenter.sh_nodepools.yaml", "karpenter.sh_nodeclaims.yaml")
    ]
    our_crds = (
        generate_crds()
        if ours_dir is None
        else [yaml.safe_load(p.read_text()) for p in sorted(ours_dir.glob("karpenter.sh_*.yaml"))]
    )
    ours, theirs = _server(our_crds), _server(upstream_crds)
    report: dict[str, Any] = {"disagreements": []}
    counter = 0

    def name() -> str:
        nonlocal counter
        counter += 1
        return f"case-{counter}"

    groups = (
        ("nodepool_cases", NODEPOOLS, NODEPOOL_CASES, base_nodepool),
        ("nodeclaim_cases", NODECLAIMS, NODECLAIM_CASES, base_nodeclaim),
    )
    for label, resource, cases, base in groups:
        agree = expected = 0
        for case in cases:
            obj = base(name())
            case.mutate(obj)
            mine, upstream = _outcome(ours, resource, obj), _outcome(theirs, resource, obj)
            same = mine[0] == upstream[0] and (not mine[0] or mine[1] == upstream[1])
            agree += same
            expected += upstream[0] == case.admitted
            if not same:
                report["disagreements"].append(
                    {"case": case.name, "ours": mine, "upstream": upstream}
                )
        report[label] = {"cases": len(cases), "agree": agree, "upstream_as_expected": expected}
    updates = (
        ("nodepool_updates", NODEPOOLS, NODEPOOL_UPDATES, base_nodepool),
        ("nodeclaim_updates", NODECLAIMS, NODECLAIM_UPDATES, base_nodeclaim),
    )
    for label, resource, update_cases, base in updates:
        agree = 0
        for update_case in update_cases:
            mine_ok = _update_outcome(
                ours, resource, base(name()), update_case.create, update_case.update
            )
            theirs_ok = _update_outcome(
                theirs, resource, base(name()), update_case.create, update_case.update
            )
            agree += mine_ok == theirs_ok
            if mine_ok != theirs_ok:
                report["disagreements"].append(
                    {"case": update_case.name, "ours": mine_ok, "upstream": theirs_ok}
                )
        report[label] = {"cases": len(update_cases), "agree": agree}
    examples = _examples(aws)
    for label, repoint in (("aws_examples", True), ("aws_examples_as_written", False)):
        agree = 0
        for example_name, doc in examples:
            obj = copy.deepcopy(doc)
            obj["metadata"]["name"] = name()
            mine_obj = copy.deepcopy(obj)
            if repoint:
                mine_obj["spec"]["template"]["spec"]["nodeClassRef"] = dict(_OURS_REF)
            mine = _outcome(ours, NODEPOOLS, mine_obj)
            upstream = _outcome(theirs, NODEPOOLS, obj)
            same = mine[0] == upstream[0] and (not mine[0] or mine[1] == upstream[1])
            agree += same
            if not same:
                report["disagreements"].append(
                    {"case": f"{label} {example_name}", "ours": mine, "upstream": upstream}
                )
        report[label] = {"nodepools": len(examples), "agree": agree}
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--karpenter", type=Path, required=True, help="kubernetes-sigs/karpenter checkout"
    )
    parser.add_argument(
        "--aws", type=Path, required=True, help="aws/karpenter-provider-aws checkout"
    )
    parser.add_argument(
        "--ours",
        type=Path,
        help="a directory of our CRD files to compare instead of the generated ones "
        "(e.g. an older release's deploy/crds)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    report = measure(args.karpenter, args.aws, args.ours)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    for key in ("nodepool_cases", "nodeclaim_cases", "nodepool_updates", "nodeclaim_updates"):
        figures = report[key]
        extra = (
            f", upstream's CRD as its tests expect: {figures['upstream_as_expected']}"
            if "upstream_as_expected" in figures
            else ""
        )
        print(f"{key}: {figures['agree']}/{figures['cases']} same outcome{extra}")
    for key, how in (
        ("aws_examples", "nodeClassRef pointed at a ClusterAPINodeClass"),
        ("aws_examples_as_written", "nodeClassRef as written"),
    ):
        examples = report[key]
        print(
            f"aws examples/v1 NodePools ({how}): "
            f"{examples['agree']}/{examples['nodepools']} same outcome"
        )
    for item in report["disagreements"]:
        print(f"  differs: {item['case']}: ours={item['ours']} upstream={item['upstream']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
