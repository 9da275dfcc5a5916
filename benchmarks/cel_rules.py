"""What CRD validation rules cost the in-memory API server: 1,000 NodeClaims, with and without.

Why: the simulator writes thousands of NodeClaims through the in-memory server, and every write
of one now evaluates the shipped CRD's CEL rules. This prints the time to create 1,000
NodeClaims, then patch each one's status and then its labels, with the rules as shipped and
with them stripped from the CRDs. Figures, not assertions (best of three runs).

    .venv/bin/python benchmarks/cel_rules.py
"""

from __future__ import annotations

import copy
import time
from typing import Any

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.sim.apiserver import InMemoryAPIServer

_CLAIM: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodeClaim",
    "metadata": {"labels": {"karpenter.sh/nodepool": "default"}},
    "spec": {
        "expireAfter": "720h",
        "nodeClassRef": {
            "group": "karpenter.cluster.x-k8s.io",
            "kind": "ClusterAPINodeClass",
            "name": "default",
        },
        "requirements": [
            {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
            {
                "key": "node.kubernetes.io/instance-type",
                "operator": "In",
                "values": ["m5.large", "m5.xlarge"],
                "minValues": 2,
            },
        ],
        "resources": {"requests": {"cpu": "1510m", "memory": "1Gi", "pods": "8"}},
    },
}


def _without_rules(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _without_rules(v) for k, v in schema.items() if k != "x-kubernetes-validations"}
    if isinstance(schema, list):
        return [_without_rules(v) for v in schema]
    return schema


def _run(crds: list[dict[str, Any]], count: int) -> dict[str, float]:
    api = InMemoryAPIServer()
    api.apply_manifests(crds)
    nodeclaims = api.resource("karpenter.sh", "v1", "nodeclaims")
    times: dict[str, float] = {}
    start = time.perf_counter()
    for index in range(count):
        claim = copy.deepcopy(_CLAIM)
        claim["metadata"]["name"] = f"nc-{index}"
        api.create(nodeclaims, claim)
    times["create"] = time.perf_counter() - start
    start = time.perf_counter()
    for index in range(count):
        status = {"status": {"providerID": f"p-{index}"}}
        api.patch(nodeclaims, f"nc-{index}", status, subresource="status")
    times["status patch"] = time.perf_counter() - start
    start = time.perf_counter()
    for index in range(count):
        api.patch(nodeclaims, f"nc-{index}", {"metadata": {"labels": {"n": str(index)}}})
    times["label patch"] = time.perf_counter() - start
    return times


def main() -> None:
    shipped = generate_crds()
    variants = {"with rules": shipped, "without rules": _without_rules(shipped)}
    for label, crds in variants.items():
        best: dict[str, float] = {}
        for _ in range(3):
            for step, seconds in _run(crds, 1000).items():
                best[step] = min(best.get(step, seconds), seconds)
        figures = ", ".join(f"{step} {seconds * 1000:.0f} ms" for step, seconds in best.items())
        print(f"1000 NodeClaims {label}: {figures}")


if __name__ == "__main__":
    main()
