"""429 and 500 storms, over HTTP: the controller waits them out and launches exactly once.

Each run is the same burst of Deployments (``harness.BURST``, deployed at 10 s) with the same
seed; a fault-free run is the reference. Under a storm the controller may be late, but when it
ends every pod is bound, it has created exactly the NodeClaims the reference did, no controller
loop has logged a crash, the cluster passes the invariant checker, and no request that got a
429 was sent again before its ``Retry-After``.
"""

from __future__ import annotations

import pytest

from .harness import (
    DEPLOY_AT,
    UNTIL,
    FaultRun,
    assert_kept_promises,
    burst_scenario,
    early_retries,
)

STORM = 30.0
RETRY_AFTER = 5
WRITES = ("create", "update", "patch", "delete")


def _storm(error: str, verbs: tuple[str, ...], start: float) -> FaultRun:
    fault_run = FaultRun()

    def begin(run: FaultRun) -> None:
        for verb in verbs:
            run.api.faults.storm(error, verb=verb, duration=STORM, retry_after_seconds=RETRY_AFTER)

    fault_run.at(start, begin)
    fault_run.run(burst_scenario(), until=UNTIL)
    return fault_run


@pytest.mark.parametrize(
    ("error", "verbs", "start"),
    [
        # Every verb, from before the pods appear: the caches cannot follow them either.
        ("throttle", ("*",), 5.0),
        ("internal_error", ("*",), 5.0),
        # Only writes, from just after the pods appear: the batch is solved during the storm,
        # so its NodeClaim creations are what fails.
        ("throttle", WRITES, DEPLOY_AT + 0.5),
        ("internal_error", WRITES, DEPLOY_AT + 0.5),
    ],
    ids=["429-every-verb", "500-every-verb", "429-writes", "500-writes"],
)
def test_storm_delays_but_changes_nothing(
    error: str, verbs: tuple[str, ...], start: float, reference: FaultRun
) -> None:
    fault_run = _storm(error, verbs, start)

    reason = "TooManyRequests" if error == "throttle" else "InternalError"
    assert fault_run.api.faults.injected[reason] > 0
    assert_kept_promises(fault_run, reference)
    if error == "throttle":
        # Backoff honours Retry-After: no request that got a 429 came back sooner, so a
        # STORM-second storm answered each distinct request at most once per Retry-After.
        throttled = [r for r in fault_run.requests() if r.status == 429]
        assert early_retries(fault_run, RETRY_AFTER) == []
        distinct = {(r.method, r.path, "watch=1" in r.query) for r in throttled}
        assert len(throttled) <= len(distinct) * (STORM // RETRY_AFTER + 1)
