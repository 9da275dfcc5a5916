"""The write log a watch-fed copy waits on to show this process's own writes."""

from __future__ import annotations

from karpenter_capi.core.kube import MACHINES, NODECLAIMS
from karpenter_capi.core.kube.writelog import WriteLog, Written


def answer(rv: str, labels: dict[str, str] | None = None) -> dict[str, object]:
    return {"metadata": {"name": "m", "namespace": "ns", "resourceVersion": rv, "labels": labels}}


def test_a_reader_learns_the_writes_since_its_cursor_per_resource() -> None:
    log = WriteLog()
    cursor = log.end(MACHINES)
    log.record(MACHINES, answer("7", {"a": "b"}), whole=True)
    log.record(NODECLAIMS, answer("8"), whole=True)
    log.record(MACHINES, answer("9"), whole=False)  # a scale answer: labels unknown

    writes, cursor = log.since(MACHINES, cursor)
    assert writes == (Written(7, "ns", "ns/m", {"a": "b"}), Written(9, "ns", "ns/m", None))
    assert log.since(MACHINES, cursor) == ((), cursor)


def test_a_reader_that_fell_behind_the_capacity_is_told_to_list() -> None:
    log = WriteLog(capacity=2)
    for rv in ("1", "2", "3"):
        log.record(MACHINES, answer(rv), whole=True)
    assert log.since(MACHINES, 0)[0] is None
    assert [w.resource_version for w in log.since(MACHINES, 1)[0] or ()] == [2, 3]


def test_a_resource_version_that_is_not_an_integer_is_logged_as_unknown() -> None:
    log = WriteLog()
    log.record(MACHINES, answer("opaque"), whole=True)
    writes, _ = log.since(MACHINES, 0)
    assert writes == (Written(None, "ns", "ns/m", {}),)


def test_a_delete_answered_with_a_status_is_logged_as_unknown() -> None:
    log = WriteLog()
    log.record(MACHINES, {"kind": "Status", "status": "Success", "metadata": {}}, whole=True)
    writes, _ = log.since(MACHINES, 0)
    assert writes == (Written(None, None, None, None),)
