"""The NodePool counter reads again only the NodeClaims and Nodes that changed.

Why: ``nodepool.counter`` reconciles a NodePool at every event of any of its NodeClaims and
Nodes, and each reconcile parsed every NodeClaim's capacity and conditions again: in a scale-up
wave, one NodeClaim's event cost a read of all of them. What a NodeClaim adds is kept with the
very NodeClaim and Node objects it was read from (the informer cache replaces an object when it
changes), so a new version of either is read again and nothing else is.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.lifecycle import counter
from karpenter_capi.core.lifecycle.counter import nodepool_resources


def _claim(name: str, cpu: str, node: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"capacity": {"cpu": cpu, "memory": "4Gi", "pods": "110"}}
    if node:
        status["nodeName"] = node
    return {
        "metadata": {"name": name, "labels": {wellknown.LABEL_NODEPOOL: "general"}},
        "status": status,
    }


def _node(name: str, cpu: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": spec,
        "status": {"capacity": {"cpu": cpu, "memory": "4Gi", "pods": "110"}},
    }


def test_a_change_of_a_nodeclaim_or_its_node_is_counted_and_nothing_else_is_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[str] = []
    real = counter._counted

    def counting(claim: Any, node: Any) -> Any:
        read.append(str(claim["metadata"]["name"]))
        return real(claim, node)

    monkeypatch.setattr(counter, "_counted", counting)
    a, b = _claim("a", "2"), _claim("b", "4", node="node-b")
    other = {**_claim("c", "8"), "metadata": {"name": "c", "labels": {}}}
    node_b = _node("node-b", "4")

    total, memo = nodepool_resources("general", [a, b, other], [node_b])
    assert (total.value("cpu"), total.value("nodes")) == (6, 2)
    assert sorted(read) == ["a", "b"]

    read.clear()
    again, memo = nodepool_resources("general", [a, b, other], [node_b], memo)
    assert again == total
    assert read == []

    # A new version of ``a`` (its capacity reported again, larger): read again, counted.
    a = copy.deepcopy(a)
    a["status"]["capacity"]["cpu"] = "3"
    total, memo = nodepool_resources("general", [a, b, other], [node_b], memo)
    assert total.value("cpu") == 7
    assert read == ["a"]

    # ``b``'s Node tainted by a disruption command: its NodeClaim no longer counts.
    read.clear()
    node_b = _node(
        "node-b", "4", taints=[{"key": wellknown.TAINT_DISRUPTED_KEY, "effect": "NoSchedule"}]
    )
    total, memo = nodepool_resources("general", [a, b, other], [node_b], memo)
    assert (total.value("cpu"), total.value("nodes")) == (3, 1)
    assert read == ["b"]

    # ``a`` deleted: gone from the count and from what is kept.
    read.clear()
    total, memo = nodepool_resources("general", [b, other], [node_b], memo)
    assert (total.value("cpu"), total.value("nodes")) == (0, 0)
    assert read == []
    assert set(memo) == {"b"}
