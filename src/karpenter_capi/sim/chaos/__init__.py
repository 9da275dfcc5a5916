"""Crash anywhere: the whole controller killed between two API writes, restarted from the API.

A controller that only keeps its promises when it is never killed does not keep them: pods are
evicted, nodes roll and leaders move, and a process can stop at any instant. This package kills
the simulated controller process at chosen writes (before a write reaches the API server, or
after it did with the answer lost), starts a new one with nothing in memory over the same
in-memory API server, and checks with ``sim.invariants`` that the cluster still ends correct:
nothing leaked, nothing launched twice, every pod bound.

``process`` holds the dying client and the restartable world, ``phases`` the situations the
controller is killed in (scale-up, scale-down, drift, multi-node consolidation) and ``driver``
the procedure: count a phase's writes once, pick kill points uniformly among them, rerun with
the kills, settle and check.
"""

from karpenter_capi.sim.chaos.driver import (
    ChaosReport,
    PhaseReport,
    Trial,
    run_chaos,
    run_phase,
    run_trial,
)
from karpenter_capi.sim.chaos.phases import PHASES, Phase, phases
from karpenter_capi.sim.chaos.process import (
    ChaosWorld,
    DyingClient,
    KillPoint,
    KillSwitch,
    PlannedKills,
    ProcessDied,
    When,
)

__all__ = [
    "PHASES",
    "ChaosReport",
    "ChaosWorld",
    "DyingClient",
    "KillPoint",
    "KillSwitch",
    "Phase",
    "PhaseReport",
    "PlannedKills",
    "ProcessDied",
    "Trial",
    "When",
    "phases",
    "run_chaos",
    "run_phase",
    "run_trial",
]
