"""``InMemoryAPIServer.watch(shared=True)``: the stored objects themselves, for the HTTP front.

The front only serializes each event, so copying every object first (once per watcher and
write) was the largest single cost of an emulated control plane at fleet scale. Stored objects
are never changed in place (a write stores a new top and metadata), so a shared event stays
what it was when it was written."""

from __future__ import annotations

from karpenter_capi.core.kube.resources import NODES
from karpenter_capi.sim.apiserver import InMemoryAPIServer


def _cm(name: str, labels: dict[str, str]) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": "k"},
    }


def test_shared_events_are_the_stored_objects_and_stay_as_written() -> None:
    api = InMemoryAPIServer()
    api.create(NODES, _cm("a", {"app": "x"}))
    stream = api.watch(NODES, shared=True, timeout_seconds=0)
    (added,) = list(stream)
    again = api.watch(NODES, shared=True, timeout_seconds=0)
    assert next(iter(again)).object is added.object  # no copy
    copied = next(iter(api.watch(NODES, timeout_seconds=0))).object
    assert copied == added.object
    assert copied is not added.object
    api.patch(NODES, "a", {"spec": {"unschedulable": True}})
    assert "unschedulable" not in added.object["spec"]  # the write stored a new object


def test_a_shared_object_leaving_the_selection_is_not_changed_by_its_deleted_event() -> None:
    api = InMemoryAPIServer()
    created = api.create(NODES, _cm("a", {"app": "x"}))
    version = created["metadata"]["resourceVersion"]
    stream = api.watch(
        NODES,
        label_selector="app=x",
        resource_version=version,
        shared=True,
        timeout_seconds=0,
    )
    api.patch(NODES, "a", {"metadata": {"labels": {"app": "y"}}})
    (left,) = list(stream)
    assert left.type == "DELETED"
    assert left.object["metadata"]["labels"] == {"app": "x"}
    assert left.object["metadata"]["resourceVersion"] != version
    before = next(iter(api.watch(NODES, resource_version="0", timeout_seconds=0)))
    assert before.object["metadata"]["labels"] == {"app": "y"}
    # The version it left from, as the log keeps it, was not given the new resourceVersion.
    replay = api.watch(
        NODES, label_selector="app=x", resource_version=version, shared=True, timeout_seconds=0
    )
    (again,) = list(replay)
    assert again.object["metadata"]["resourceVersion"] == left.object["metadata"]["resourceVersion"]
    assert again.object is not left.object


def test_a_merge_patch_of_a_built_in_kind_leaves_every_stored_version_as_written() -> None:
    """A merge patch of a built-in kind is applied to the stored object without a deep copy
    first: what it shares with the new version must stay unchanged in the old one, in the
    watch log, and in what the caller gets back (a private copy)."""
    api = InMemoryAPIServer()
    node = _cm("a", {"app": "x"})
    node["status"] = {
        "conditions": [{"type": "Ready", "status": "False"}],
        "capacity": {"cpu": "8"},
    }
    created = api.create(NODES, node)
    version = created["metadata"]["resourceVersion"]
    (before,) = list(api.watch(NODES, shared=True, timeout_seconds=0))
    old = before.object
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    written = api.patch(NODES, "a", {"status": ready}, subresource="status")
    api.patch(NODES, "a", {"metadata": {"labels": {"app": "y"}}, "spec": {"unschedulable": True}})
    assert old["status"]["conditions"] == [{"type": "Ready", "status": "False"}]
    assert old["metadata"]["labels"] == {"app": "x"}
    assert old["spec"] == {"providerID": "k"}
    assert old["metadata"]["resourceVersion"] == version
    # The caller's copy is its own: changing it changes nothing stored.
    written["status"]["capacity"]["cpu"] = "1"
    written["metadata"]["labels"]["app"] = "z"
    current = api.get(NODES, "a")
    assert current["status"] == {
        "conditions": [{"type": "Ready", "status": "True"}],
        "capacity": {"cpu": "8"},
    }
    assert current["metadata"]["labels"] == {"app": "y"}
    assert current["spec"] == {"providerID": "k", "unschedulable": True}
    replay = list(api.watch(NODES, resource_version=version, timeout_seconds=0))
    assert [e.object["status"]["conditions"][0]["status"] for e in replay] == ["True", "True"]
    assert [e.object["metadata"]["labels"]["app"] for e in replay] == ["x", "y"]


def test_a_no_op_merge_patch_keeps_the_resource_version() -> None:
    api = InMemoryAPIServer()
    created = api.create(NODES, _cm("a", {"app": "x"}))
    same = api.patch(NODES, "a", {"metadata": {"labels": {"app": "x"}}})
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_shared_replies_are_the_stored_objects_and_default_replies_are_copies() -> None:
    """The HTTP front asks for its replies ``shared`` (it only serializes them): get, create,
    update and patch then return the stored object itself; every other caller still gets a
    private copy, which it may change without changing anything stored."""
    api = InMemoryAPIServer()
    created = api.create(NODES, _cm("a", {"app": "x"}), shared=True)
    assert api.get(NODES, "a", shared=True) is created
    patched = api.patch(NODES, "a", {"spec": {"unschedulable": True}}, shared=True)
    assert api.get(NODES, "a", shared=True) is patched
    assert "unschedulable" not in created["spec"]  # the write stored a new object
    body = api.get(NODES, "a")
    body["metadata"]["labels"]["app"] = "z"  # a private copy: stored is unchanged
    assert patched["metadata"]["labels"] == {"app": "x"}
    updated = api.update(NODES, body, shared=True)
    assert api.get(NODES, "a", shared=True) is updated
    assert patched["metadata"]["labels"] == {"app": "x"}
    copied = api.patch(NODES, "a", {"metadata": {"labels": {"tier": "1"}}})
    copied["metadata"]["labels"]["app"] = "changed"
    copied["spec"]["providerID"] = "changed"
    stored = api.get(NODES, "a", shared=True)
    assert stored["metadata"]["labels"] == {"app": "z", "tier": "1"}
    assert stored["spec"] == {"providerID": "k", "unschedulable": True}
