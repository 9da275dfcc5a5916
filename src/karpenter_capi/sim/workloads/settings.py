"""What the workload emulation can be told: how long a pod takes to start and to stop.

A simulated cluster needs pods that are not Running the instant they are bound (so that
readiness, PodDisruptionBudgets and consolidation see the same window as on a real node) and
graceful deletions that end on their own (so that drains finish). Both are global defaults that a
pod can override with an annotation, next to the workload they affect.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from karpenter_capi.sim.capi.settings import SIM_DOMAIN

ANNOTATION_START_DELAY: Final = SIM_DOMAIN + "start-delay"
"""On a pod (or its template): time from binding to a Ready node until ``Running``."""


@dataclass(frozen=True)
class WorkloadSettings:
    """Global defaults of the workload emulation.

    ``start_delay``: seconds from the moment the kubelet stand-in first sees a pod bound to a
    Ready Node until the pod is ``Running`` and Ready. ``termination_cap``: a gracefully deleted
    pod is finished after ``min(deletionGracePeriodSeconds, termination_cap)`` seconds, since
    simulated containers stop at once when told to (a real kubelet waits for the containers,
    at most the grace period). ``expectation_timeout``: how long a controller waits for the
    cache to show a pod it created or deleted before acting again without it (kube's
    expectations TTL is 5 minutes; a stepped simulation never needs more than a pass).
    """

    start_delay: float = 3.0
    termination_cap: float = 2.0
    expectation_timeout: float = 30.0

    def __post_init__(self) -> None:
        for field in ("start_delay", "termination_cap", "expectation_timeout"):
            value = getattr(self, field)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{field} must be a finite number of seconds >= 0, not {value}")
