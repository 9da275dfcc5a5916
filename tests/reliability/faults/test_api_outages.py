"""The API server restarting, compacting its history and answering slowly, over HTTP.

Same burst, same seed as the storms (``harness``): the controller may be late, but it ends
with the reference run's NodeClaims and nodes, every pod bound and a sound cluster.
"""

from __future__ import annotations

import pytest

from karpenter_capi.core.kube.resources import CONFIGMAPS

from .harness import (
    DEPLOY_AT,
    UNTIL,
    FaultRun,
    assert_kept_promises,
    burst_scenario,
)

DOWN_FOR = 20.0


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
    # Informers back off to at most 30 s, so the controller is back within that of the return.
    back = min(r.at for r in requests if r.at >= reopened and r.status < 300)
    assert back - reopened <= 30.0
    launched = min(
        r.at for r in requests if r.at >= reopened and r.method == "POST" and r.status == 201
    )
    assert launched - reopened <= 30.0 + 2.0
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
