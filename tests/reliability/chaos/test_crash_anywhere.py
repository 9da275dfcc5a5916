"""The whole controller killed at 200 uniformly chosen writes, and restarted from the API alone.

Four phases (``sim.chaos.phases``: scale-up, scale-down, drift replacement, multi-node
consolidation) at about 16 pods each. Per phase, a run without kills counts the controller's
writes in the phase's window; then reruns of that window from the same prepared cluster each
kill the controller at up to ``KILLS_PER_TRIAL`` writes drawn uniformly among those (before the
write reaches the API, or after it with the answer lost), restarting it from nothing each
time. The 200 are kills that happened (the process died there): 50 per phase, 10 per rerun; a
planned point a rerun never reached (restarted controllers often write less) is not counted,
and further reruns make up for it. After each trial the cluster settles and must be sound:
``check_invariants`` finds nothing and every pod the Deployments ask for is bound.

The chaos seed is ``CHAOS_SEED`` (the environment variable ``KARPENTER_CAPI_CHAOS_SEED``
overrides it, to explore); a failure names the seed, the phase, the trial and its kill points,
which replay it exactly.
"""

from __future__ import annotations

import os

import pytest

from karpenter_capi.sim.chaos import PHASES, Phase, phases, run_phase

CHAOS_SEED = int(os.environ.get("KARPENTER_CAPI_CHAOS_SEED", "17"))
KILL_POINTS = 200
KILLS_PER_TRIAL = 10


# About 10 to 40 s a phase on a quiet 2-core machine; the margin is for a busy one.
@pytest.mark.timeout(300)
@pytest.mark.parametrize("phase", phases(), ids=lambda p: p.name)
def test_the_controller_killed_at_any_write_ends_sound(phase: Phase) -> None:
    wanted = KILL_POINTS // len(PHASES)
    report = run_phase(phase, seed=CHAOS_SEED, kill_points=wanted, kills_per_trial=KILLS_PER_TRIAL)
    failures = report.failures()
    assert not failures, "\n".join(f.describe() for f in failures)
    assert report.writes >= KILLS_PER_TRIAL  # the phase gave the controller work to do
    assert report.kill_points_tried == wanted, (
        f"seed {CHAOS_SEED}, phase {phase.name}: only {report.kill_points_tried} of {wanted} "
        f"kill points reached in {len(report.trials)} reruns"
    )
