"""A defect the chaos benchmark found: several restarts during a drift roll-out at 200 pods
leave Machines of the new MachineSet that no NodeClaim claims (``leaked-machine``), with their
Nodes (``unclaimed-node``).

Found by ``benchmarks/chaos.py --chaos 30 --pods 200 --phase drift --kills-per-run 10`` (seed
0): 3 of its 4 reruns ended with 1 to 4 such Machines; every single kill tried alone, and every
rerun at 16 or 50 pods, ended sound. This is the first of those reruns; alone (about 20 s on
a quiet machine) it ends with the same four Machines leaked. Kept as a known failure until the
launch/binding path is fixed: it then passes, and the mark goes.
"""

from __future__ import annotations

import pytest

from karpenter_capi.sim.chaos import KillPoint, phases, run_trial

POINTS = [
    KillPoint(29, "before"),
    KillPoint(237, "after"),
    KillPoint(323, "after"),
    KillPoint(345, "after"),
    KillPoint(439, "before"),
    KillPoint(670, "before"),
    KillPoint(737, "before"),
    KillPoint(803, "after"),
    KillPoint(828, "before"),
    KillPoint(976, "before"),
]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.xfail(reason="restarts during drift leak MachineDeployment replicas", strict=False)
def test_restarts_during_a_drift_roll_out_leak_no_machine() -> None:
    drift = next(p for p in phases(200) if p.name == "drift")
    trial = run_trial(drift, seed=0, points=POINTS)
    assert trial.deaths
    assert trial.ok, trial.describe()
