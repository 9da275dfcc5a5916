"""Which Node belongs to which NodeClaim: both controllers must agree, or one waits forever."""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.kube.cache import Store
from karpenter_capi.core.kube.indexes import NODE_INDEXERS
from karpenter_capi.core.termination.relations import nodeclaims_for_node, nodes_for_nodeclaim


def _node(name: str, provider_id: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"providerID": provider_id}}


def _claim(name: str, provider_id: str = "", node_name: str = "") -> dict[str, Any]:
    status = {"providerID": provider_id, "nodeName": node_name}
    return {"metadata": {"name": name}, "status": status}


def _stores(
    nodes: list[dict[str, Any]], claims: list[dict[str, Any]]
) -> tuple[Store[Any], Store[Any]]:
    node_store: Store[Any] = Store(NODE_INDEXERS)  # claims without an index: the scan fallback
    node_store.replace({n["metadata"]["name"]: n for n in nodes})
    claim_store: Store[Any] = Store()
    claim_store.replace({c["metadata"]["name"]: c for c in claims})
    return node_store, claim_store


def _names(objs: list[dict[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def test_the_provider_id_pairs_them_both_ways() -> None:
    nodes, claims = _stores(
        [_node("n1", "p://1"), _node("n2", "p://2")],
        [_claim("c1", "p://1", "n1"), _claim("c2", "p://2")],
    )
    assert _names(nodeclaims_for_node(_node("n2", "p://2"), claims)) == ["c2"]
    assert _names(nodes_for_nodeclaim(_claim("c2", "p://2"), nodes)) == ["n2"]


def test_the_node_name_pairs_them_while_one_side_has_no_provider_id() -> None:
    nodes, claims = _stores([_node("n1")], [_claim("c1", "p://1", "n1")])
    assert _names(nodes_for_nodeclaim(_claim("c1", "p://1", "n1"), nodes)) == ["n1"]
    assert _names(nodeclaims_for_node(_node("n1"), claims)) == ["c1"]


def test_a_reused_node_name_with_another_provider_id_is_another_machine() -> None:
    nodes, claims = _stores([_node("n1", "p://new")], [_claim("c1", "p://old", "n1")])
    assert nodes_for_nodeclaim(_claim("c1", "p://old", "n1"), nodes) == []
    assert nodeclaims_for_node(_node("n1", "p://new"), claims) == []
