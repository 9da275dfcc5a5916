"""What a write spares itself stays invisible: an update checks only the metadata parts it
changes, yet refuses an invalid write with the errors the whole metadata's check gives; the
stored object a write hands over is never the previous version's; a watch reader's wake-up,
given as its wait times out, is taken by the next wait and never given twice."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.kube.errors import Invalid
from karpenter_capi.core.kube.resources import PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.messages import validate_metadata
from karpenter_capi.sim.apiserver.objects import copy_json
from karpenter_capi.sim.apiserver.watch import InMemoryWatch

_OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "u-1"}


def _pod(name: str, **metadata: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **metadata}, "spec": {"containers": []}}


def _causes(raised: pytest.ExceptionInfo[Invalid]) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in raised.value.details["causes"]]


def _whole_check(meta: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e.field, e.message) for e in validate_metadata(meta)]


@pytest.mark.parametrize(
    "patch",
    [
        {"labels": {"bad key!": "x"}},
        {"annotations": {"Bad Key!": "x"}},
        {"labels": {"app": "x" * 64}, "annotations": {"/nope": "x"}},
        {"ownerReferences": [{**_OWNER, "uid": ""}], "annotations": {"note": "y"}},
        {"labels": {"tier": "has space"}, "ownerReferences": [{**_OWNER, "kind": ""}]},
    ],
)
def test_an_invalid_metadata_patch_is_refused_with_the_whole_checks_errors(
    apiserver: InMemoryAPIServer, patch: dict[str, Any]
) -> None:
    created = apiserver.create(
        PODS,
        _pod(
            "web",
            labels={"app": "web", "example.com/team": "a"},
            annotations={"note": "x"},
            ownerReferences=[_OWNER],
        ),
        "default",
    )
    with pytest.raises(Invalid) as raised:
        apiserver.patch(PODS, "web", {"metadata": patch}, "default")
    merged = copy_json(created["metadata"])
    for part, value in patch.items():
        merged[part] = {**merged[part], **value} if isinstance(value, dict) else value
    assert _causes(raised) == _whole_check(merged)
    assert apiserver.get(PODS, "web", "default") == created


def test_the_annotations_size_counts_every_annotation_when_one_is_added(
    apiserver: InMemoryAPIServer,
) -> None:
    big = {f"a{index}": "x" * 60_000 for index in range(4)}  # 240,008 bytes of 262,144
    apiserver.create(PODS, _pod("web", annotations=big), "default")
    with pytest.raises(Invalid, match="Too long: must have at most 262144 bytes"):
        apiserver.patch(PODS, "web", {"metadata": {"annotations": {"b": "y" * 30_000}}}, "default")
    # a label patch leaves the (valid, unchanged) annotations alone
    apiserver.patch(PODS, "web", {"metadata": {"labels": {"app": "web"}}}, "default")


def test_a_write_never_changes_the_version_it_replaces(apiserver: InMemoryAPIServer) -> None:
    apiserver.create(PODS, _pod("web", labels={"app": "web"}), "default")
    before = apiserver.get(PODS, "web", "default", shared=True)
    as_it_was = copy_json(before)
    apiserver.patch(PODS, "web", {"status": {"phase": "Running"}}, "default", subresource="status")
    apiserver.patch(PODS, "web", {"metadata": {"labels": {"app": "api"}}}, "default")
    pod = apiserver.get(PODS, "web", "default")
    apiserver.update(PODS, {**pod, "spec": {**pod["spec"], "activeDeadlineSeconds": 5}})
    assert before == as_it_was
    after = apiserver.get(PODS, "web", "default", shared=True)
    assert after["metadata"] is not before["metadata"]
    assert (
        int(after["metadata"]["resourceVersion"])
        == int(as_it_was["metadata"]["resourceVersion"]) + 3
    )


def test_a_wake_up_given_as_a_wait_times_out_is_taken_by_the_next_wait(
    apiserver: InMemoryAPIServer,
) -> None:
    stream = apiserver.watch(PODS, "default", resource_version=apiserver.resource_version)
    assert isinstance(stream, InMemoryWatch)
    with apiserver._lock:
        # The reader blocked in its wait; a write wakes it, and a second write does not wake
        # it again (the wake-up is given once).
        stream._waiting = True
        stream.wake()
        stream.wake()
        assert stream._signalled
        # The reader's wait had timed out just before: it comes back without the wake-up.
        stream._waiting = False
        stream.wake()  # not waiting: nothing to give (and nothing given twice)
        # Its next wait takes the wake-up at once (the lock released and held again).
        stream._wait(60.0)
        assert not stream._signalled
        assert not stream._waiting
        # And the wake-ups after it work as before.
        stream._waiting = True
        stream.wake()
        stream._waiting = False
        stream._wait(60.0)
        assert not stream._signalled
    assert stream.woken == 4
    stream.close()
