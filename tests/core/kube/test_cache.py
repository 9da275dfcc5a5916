"""The store and its indexes: lookups controllers make on every reconcile stay correct."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from karpenter_capi.core.kube.cache import Store, make_key, object_key, split_key
from karpenter_capi.core.kube.indexes import (
    BY_MACHINE_DEPLOYMENT,
    BY_MACHINE_SET,
    BY_NODE_NAME,
    BY_OWNER_UID,
    BY_PROVIDER_ID,
    BY_PROVIDER_ID_LIST,
    MACHINE_INDEXERS,
    MACHINE_POOL_INDEXERS,
    NODE_INDEXERS,
    POD_INDEXERS,
    index_by,
)


def pod(name: str, node: str | None = None, namespace: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app"}]}
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def machine(
    name: str,
    *,
    provider_id: str | None = None,
    owner_uid: str | None = None,
    deployment: str | None = None,
    machine_set: str | None = None,
    namespace: str = "capi",
) -> dict[str, Any]:
    labels = {}
    if deployment:
        labels["cluster.x-k8s.io/deployment-name"] = deployment
    if machine_set:
        labels["cluster.x-k8s.io/set-name"] = machine_set
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if owner_uid:
        metadata["ownerReferences"] = [
            {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet", "uid": owner_uid}
        ]
    spec: dict[str, Any] = {"clusterName": "c1"}
    if provider_id:
        spec["providerID"] = provider_id
    return {"metadata": metadata, "spec": spec}


def test_keys_are_namespace_slash_name_or_just_name() -> None:
    assert object_key(pod("web")) == "default/web"
    assert object_key({"metadata": {"name": "node-1"}}) == "node-1"
    assert make_key("web", "default") == "default/web"
    assert split_key("default/web") == ("default", "web")
    assert split_key("node-1") == (None, "node-1")
    with pytest.raises(ValueError, match=r"metadata\.name"):
        object_key({"metadata": {}})


def test_pods_by_node_follow_binding_moves_and_deletes() -> None:
    store: Store[dict[str, Any]] = Store(POD_INDEXERS)
    store.upsert("default/a", pod("a", "n1"))
    store.upsert("default/b", pod("b", "n1"))
    store.upsert("default/pending", pod("pending"))
    assert [p["metadata"]["name"] for p in store.by_index(BY_NODE_NAME, "n1")] == ["a", "b"]
    store.upsert("default/b", pod("b", "n2"))
    assert store.index_keys(BY_NODE_NAME, "n1") == ["default/a"]
    assert store.index_keys(BY_NODE_NAME, "n2") == ["default/b"]
    store.delete("default/a")
    assert store.by_index(BY_NODE_NAME, "n1") == []
    # Unbound pods are in the store but under no node.
    assert store.index_values(BY_NODE_NAME) == ["n2"]
    assert "default/pending" in store


def test_nodes_by_provider_id_including_one_set_late() -> None:
    store: Store[dict[str, Any]] = Store(NODE_INDEXERS)
    store.upsert("n1", {"metadata": {"name": "n1"}, "spec": {}})
    assert store.index_values(BY_PROVIDER_ID) == []
    store.upsert("n1", {"metadata": {"name": "n1"}, "spec": {"providerID": "aws:///a/i-1"}})
    assert [n["metadata"]["name"] for n in store.by_index(BY_PROVIDER_ID, "aws:///a/i-1")] == ["n1"]


def test_machines_by_provider_id_owner_and_scalable_resource() -> None:
    store: Store[dict[str, Any]] = Store(MACHINE_INDEXERS)
    store.upsert(
        "capi/m1",
        machine("m1", provider_id="aws:///a/i-1", owner_uid="ms-uid", deployment="workers"),
    )
    store.upsert("capi/m2", machine("m2", owner_uid="ms-uid", deployment="workers"))
    store.upsert("other/m3", machine("m3", deployment="workers", namespace="other"))
    store.upsert("capi/m4", machine("m4", machine_set="workers-abc"))
    assert store.index_keys(BY_PROVIDER_ID, "aws:///a/i-1") == ["capi/m1"]
    assert store.index_keys(BY_OWNER_UID, "ms-uid") == ["capi/m1", "capi/m2"]
    # Same deployment name in two namespaces: two different owners.
    assert store.index_keys(BY_MACHINE_DEPLOYMENT, "capi/workers") == ["capi/m1", "capi/m2"]
    assert store.index_keys(BY_MACHINE_DEPLOYMENT, "other/workers") == ["other/m3"]
    assert store.index_keys(BY_MACHINE_SET, "capi/workers-abc") == ["capi/m4"]
    # The provider fills in the providerID of m2; m1 is deleted.
    store.upsert(
        "capi/m2",
        machine("m2", provider_id="aws:///a/i-2", owner_uid="ms-uid", deployment="workers"),
    )
    store.delete("capi/m1")
    assert store.by_index(BY_PROVIDER_ID, "aws:///a/i-1") == []
    assert store.index_keys(BY_PROVIDER_ID, "aws:///a/i-2") == ["capi/m2"]
    assert store.index_keys(BY_OWNER_UID, "ms-uid") == ["capi/m2"]


def test_machine_pools_by_each_provider_id_in_their_list() -> None:
    store: Store[dict[str, Any]] = Store(MACHINE_POOL_INDEXERS)
    pool = {"metadata": {"name": "p", "namespace": "capi"}, "spec": {"providerIDList": ["a", "b"]}}
    store.upsert("capi/p", pool)
    assert store.index_keys(BY_PROVIDER_ID_LIST, "a") == ["capi/p"]
    assert store.index_keys(BY_PROVIDER_ID_LIST, "b") == ["capi/p"]


def test_malformed_objects_are_stored_but_not_indexed() -> None:
    store: Store[dict[str, Any]] = Store(MACHINE_INDEXERS)
    weird = {"metadata": {"name": "x", "ownerReferences": "nope", "labels": []}, "spec": []}
    store.upsert("x", weird)
    assert store.get("x") is weird
    for index in MACHINE_INDEXERS:
        assert store.index_values(index) == []


def test_an_index_function_that_raises_does_not_break_the_store() -> None:
    def explode(obj: dict[str, Any]) -> list[str]:
        raise RuntimeError("bad index")

    store: Store[dict[str, Any]] = Store({"boom": explode, **POD_INDEXERS})
    store.upsert("default/a", pod("a", "n1"))
    assert store.index_keys(BY_NODE_NAME, "n1") == ["default/a"]
    assert store.index_values("boom") == []


def test_updates_move_only_the_index_values_that_changed() -> None:
    # upsert re-indexes only an index whose values an update changed: a value dropped, one
    # kept and one added must all show, and an index that fails on the update unindexes.
    def listed(obj: dict[str, Any]) -> list[str]:
        if obj.get("broken"):
            raise RuntimeError("bad index")
        return list(obj["spec"]["providerIDList"])

    store: Store[dict[str, Any]] = Store({BY_PROVIDER_ID_LIST: listed, **POD_INDEXERS})
    first = {"metadata": {"name": "p"}, "spec": {"providerIDList": ["a", "b"], "nodeName": "n1"}}
    store.upsert("p", first)
    store.upsert("p", {**first, "spec": {"providerIDList": ["b", "c"], "nodeName": "n1"}})
    assert store.index_values(BY_PROVIDER_ID_LIST) == ["b", "c"]
    assert store.index_keys(BY_NODE_NAME, "n1") == ["p"]
    store.upsert("p", {**first, "broken": True})
    assert store.index_values(BY_PROVIDER_ID_LIST) == []
    assert store.index_keys(BY_NODE_NAME, "n1") == ["p"]
    assert store.get("p") == {**first, "broken": True}


class PodView(BaseModel):
    """A narrow frozen model as ``core.api`` would define it."""

    model_config = ConfigDict(frozen=True)
    name: str
    node_name: str | None = None


def test_models_are_indexed_through_a_small_getter() -> None:
    store: Store[PodView] = Store({"node": index_by(lambda p: p.node_name)})
    store.upsert("default/a", PodView(name="a", node_name="n1"))
    store.upsert("default/b", PodView(name="b"))
    assert [p.name for p in store.by_index("node", "n1")] == ["a"]
    store.add_indexer("name", index_by(lambda p: [p.name, p.name.upper()]))
    assert [p.name for p in store.by_index("name", "B")] == ["b"]
    with pytest.raises(ValueError, match="already exists"):
        store.add_indexer("name", index_by(lambda p: p.name))
    with pytest.raises(KeyError, match="no index"):
        store.by_index("missing", "x")


def test_replace_swaps_content_and_indexes_together() -> None:
    store: Store[dict[str, Any]] = Store(POD_INDEXERS)
    store.upsert("default/a", pod("a", "n1"))
    store.replace({"default/b": pod("b", "n1"), "default/c": pod("c", "n2")})
    assert sorted(store.keys()) == ["default/b", "default/c"]
    assert store.index_keys(BY_NODE_NAME, "n1") == ["default/b"]
    assert len(store) == 2


def test_snapshot_is_consistent_and_unaffected_by_later_writes() -> None:
    store: Store[dict[str, Any]] = Store(POD_INDEXERS)
    store.upsert("default/a", pod("a", "n1"))
    snapshot = store.snapshot()
    store.upsert("default/a", pod("a", "n2"))
    store.upsert("default/b", pod("b", "n1"))
    assert len(snapshot) == 1
    assert [p["metadata"]["name"] for p in snapshot.by_index(BY_NODE_NAME, "n1")] == ["a"]
    assert snapshot.by_index(BY_NODE_NAME, "n2") == []
    assert snapshot.get("default/b") is None


def test_concurrent_writers_and_readers_never_see_an_object_without_its_index() -> None:
    store: Store[dict[str, Any]] = Store(POD_INDEXERS)
    stop = threading.Event()
    problems: list[str] = []

    def writer(prefix: str) -> None:
        for i in range(300):
            key = f"default/{prefix}{i % 10}"
            store.upsert(key, pod(f"{prefix}{i % 10}", f"n{i % 3}"))
            if i % 7 == 0:
                store.delete(key)

    def reader() -> None:
        while not stop.is_set():
            snapshot = store.snapshot()
            for key, obj in snapshot.items.items():
                node = obj["spec"]["nodeName"]
                if obj not in snapshot.by_index(BY_NODE_NAME, node):
                    problems.append(key)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    writers = [threading.Thread(target=writer, args=(p,)) for p in "abc"]
    for thread in readers + writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    for thread in readers:
        thread.join()
    assert problems == []
    for obj in store.list():
        assert object_key(obj) in store.index_keys(BY_NODE_NAME, obj["spec"]["nodeName"])
