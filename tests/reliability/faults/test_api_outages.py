"""The API server restarting, compacting its history and answering slowly, over HTTP.

Same burst, same seed as the storms (``harness``): the controller may be late, but it ends
with the reference run's NodeClaims and nodes, every pod bound and a sound cluster.
"""

from __future__ import annotations

import logging

import pytest

from karpenter_capi.core.kube.backoff import RECONNECT_MAX, UNREACHABLE_RETRY_MAX
from karpenter_capi.core.kube.errors import STORAGE_INITIALIZING, TooManyRequests
from karpenter_capi.core.kube.resources import CONFIGMAPS
from karpenter_capi.sim.apiserver.http import ServedRequest

from .harness import (
    DEPLOY_AT,
    UNTIL,
    FaultRun,
    assert_kept_promises,
    burst_scenario,
)

DOWN_FOR = 20.0
INITIALIZING_FOR = 5.0
"""How long a restarted kube-apiserver answers ``429 storage is (re)initializing``."""
LONG_DOWN_FOR = 59.0
"""With ``INITIALIZING_FOR``, the 64 s outage of issue 24."""


def _back_and_launching(requests: list[ServedRequest], since: float) -> tuple[float, float]:
    """Seconds from ``since`` to the controller's first answered request, and to its first
    NodeClaim created."""
    back = min(r.at for r in requests if r.at >= since and r.status < 300)
    created = min(
        r.at
        for r in requests
        if r.at >= since
        and r.method == "POST"
        and r.status == 201
        and r.path.endswith("nodeclaims")
    )
    return back - since, created - since


def test_api_server_restart_refuses_connections_for_20s_then_all_resumes(
    reference: FaultRun,
) -> None:
    fault_run = FaultRun()
    down_at = DEPLOY_AT + 1  # the pods exist; the batch has not been solved yet
    fault_run.at(down_at, FaultRun.close_front)
    fault_run.at(down_at + DOWN_FOR, FaultRun.open_front)
    fault_run.run(burst_scenario(), until=UNTIL)

    ((closed, reopened),) = fault_run.down
    assert reopened - closed == pytest.approx(DOWN_FOR, abs=1e-3)
    assert fault_run.http.restarts == 1
    requests = fault_run.requests()
    assert not [r for r in requests if closed < r.at < reopened]
    # Informers ask a server that refused them again within RECONNECT_MAX, so the controller
    # is back within that of the return, and the batch the outage held is solved at once.
    back, launched = _back_and_launching(requests, reopened)
    assert back <= RECONNECT_MAX
    assert launched <= UNREACHABLE_RETRY_MAX
    assert_kept_promises(fault_run, reference)


def _reopen_still_initializing(fault_run: FaultRun) -> None:
    fault_run.open_front()
    error = TooManyRequests(STORAGE_INITIALIZING, retry_after_seconds=1)
    fault_run.api.faults.fail(
        "*", "*", error, times=None, duration=INITIALIZING_FOR, over_http=True
    )


def test_a_minute_long_restart_ending_in_storage_initializing_costs_seconds_after_it(
    reference: FaultRun, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's outage: refused for 59 s, then ``429 storage is (re)initializing`` for 5 s
    as kube-apiserver answers while etcd comes back. Once the storage is ready the burst is
    served as fast as in a fault-free run (before: not at all within the run, the launch and
    reconcile backoffs having grown to a minute), and the outage is logged as lines, never a
    traceback."""
    caplog.set_level(logging.DEBUG, logger="karpenter_capi")
    fault_run = FaultRun()
    down_at = DEPLOY_AT + 1
    fault_run.at(down_at, FaultRun.close_front)
    fault_run.at(down_at + LONG_DOWN_FOR, _reopen_still_initializing)
    fault_run.run(burst_scenario(), until=UNTIL + 30)

    ((_, reopened),) = fault_run.down
    ready = reopened + INITIALIZING_FOR
    requests = fault_run.requests()
    assert [r for r in requests if r.status == 429], "the restart should have answered 429"
    back, _ = _back_and_launching(requests, ready)
    assert back <= RECONNECT_MAX
    result, clean = fault_run.result, reference.result
    assert result is not None
    assert clean is not None
    assert result.pods_bound == result.pods_total
    served_after_ready = result.pod_bound_seconds["max"] - (ready - DEPLOY_AT)
    assert served_after_ready <= clean.pod_bound_seconds["max"] + 1.0  # the runner's 1 s pace
    assert [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.exc_info] == []
    assert_kept_promises(fault_run, reference)


def _write_then_compact(fault_run: FaultRun) -> None:
    """The cluster writes (the controller has not seen it yet), then etcd compacts: every
    informer's resume point is now older than the history, so its next watch gets 410 Gone."""
    api = fault_run.api
    name = f"compaction-{api.faults.injected['compaction']}"
    api.create(CONFIGMAPS, {"metadata": {"name": name, "namespace": "default"}, "data": {}})
    api.faults.compact()


def test_compaction_every_few_seconds_forces_relists_and_loses_nothing(
    reference: FaultRun,
) -> None:
    fault_run = FaultRun()
    for at in range(5, 65, 7):
        fault_run.at(float(at), _write_then_compact)
    fault_run.run(burst_scenario(), until=UNTIL)

    assert fault_run.api.faults.injected["compaction"] == 9
    # A resume after a compaction gets 410 Gone inside the watch: the informer lists again.
    relists = [
        r
        for r in fault_run.requests()
        if 5.0 < r.at < 65.0
        and r.method == "GET"
        and "watch=1" not in r.query
        and r.path.endswith("/pods")
    ]
    assert relists
    assert_kept_promises(fault_run, reference)


def test_slow_answers_for_30s_delay_but_change_nothing(reference: FaultRun) -> None:
    fault_run = FaultRun()
    fault_run.at(5.0, lambda run: run.api.faults.slow(2.0, duration=30.0))
    fault_run.run(burst_scenario(), until=UNTIL)

    assert fault_run.api.faults.injected["slow"] > 0
    assert_kept_promises(fault_run, reference)


def test_lost_answers_to_nodeclaim_creations_launch_nothing_twice(reference: FaultRun) -> None:
    """The write happens, the answer never arrives (a reset connection): the controller must
    find what it created rather than create it again."""
    fault_run = FaultRun()
    fault_run.at(
        DEPLOY_AT,
        lambda run: run.api.faults.lose_answers(verb="create", resource="nodeclaims", times=2),
    )
    fault_run.run(burst_scenario(), until=UNTIL)

    lost = [r for r in fault_run.requests() if not r.answered]
    assert [(r.method, r.status) for r in lost] == [("POST", 201), ("POST", 201)]
    assert_kept_promises(fault_run, reference)


def test_lost_answers_to_every_write_for_30s_launch_nothing_twice(reference: FaultRun) -> None:
    fault_run = FaultRun()
    fault_run.at(
        DEPLOY_AT,
        lambda run: [
            run.api.faults.lose_answers(verb=verb, times=None, duration=30.0)
            for verb in ("create", "update", "patch", "delete")
        ],
    )
    fault_run.run(burst_scenario(), until=UNTIL)

    assert fault_run.api.faults.injected["lost_answer"] > 2
    assert_kept_promises(fault_run, reference)
