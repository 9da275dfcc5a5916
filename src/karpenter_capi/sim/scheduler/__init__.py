"""A kube-scheduler stand-in for the simulated cluster (``SimScheduler``).

It lives beside the Cluster API emulation rather than in ``core`` because only the simulator
needs it: in a real cluster kube-scheduler binds the pods. Its fit rules are written apart from
``karpenter_capi.core.scheduling`` on purpose, so that a scenario fails when the
autoprovisioner's view of where pods fit and the scheduler's disagree.
"""

from karpenter_capi.sim.scheduler.controller import CYCLE_KEY, SCHEDULER_NAME, SimScheduler

__all__ = ["CYCLE_KEY", "SCHEDULER_NAME", "SimScheduler"]
