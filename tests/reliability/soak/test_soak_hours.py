"""A few hours of the day of churn, at small scale: sound every hour, flat in memory and load.

``benchmarks/soak.py`` runs the shipped ``soak-day`` scenario for 24 virtual hours; this runs
the same churn (the same Deployments scaling on the same schedule, quiet for the last 20
minutes of every hour, one Deployment created and deleted hourly) with half the replicas, for
three hours, with the drift moved into the third hour (every MachineDeployment's version
moves at 2h05m); nodes expire after an hour, so replacements of both kinds happen in the window.

What it asserts, at every hour mark: every invariant holds (``sim.invariants``, settled: the
quiet part of the hour has passed); every pod is bound; the memory the controller retains
(``sim.footprint``'s walk from the ``Operator``) does not grow from hour to hour; and the
controller's API requests in each later hour stay within a band of the first's.
"""

from __future__ import annotations

import math

import pytest

from karpenter_capi.sim.scenario.schema import Scenario, TimelineAction, load_scenario
from karpenter_capi.sim.soak import SoakReport, soak

HOURS = 3

# Each hour asks for the same pods, but the cluster each hour starts from is whatever
# consolidation left at the previous mark (two to five nodes), and a drifted or expired node's
# replacement (launch, drain, delete) adds a few hundred requests to the hour it falls in: at
# this scale hours differ by up to about a fifth. A controller that accumulates work per object
# it has ever seen adds to every hour in turn; after three hours of churn that shows well
# beyond 35%.
REQUEST_BAND = 0.35

# The controller's retained memory varies with the cluster at the mark (a node more or less is
# tens of kilobytes of cache); before the fixes it took on ~40% an hour (a timer per deleted
# NodeClaim, an event-recorder entry per object ever told something, a hundred disruption
# commands with their pods).
MEMORY_BAND = 0.15


def _halved(counts: int | list[int] | None) -> int | list[int] | None:
    if isinstance(counts, list):
        return [math.ceil(count / 2) for count in counts]
    return None if counts is None else math.ceil(counts / 2)


def small(scenario: Scenario) -> Scenario:
    """``scenario`` with half the replicas and drift at 2h05m."""
    timeline: list[TimelineAction] = []
    for action in scenario.timeline:
        update: dict[str, object] = {"replicas": _halved(action.replicas)}
        if action.action == "patch":
            update["at"] = 2 * 3600 + 5 * 60
        timeline.append(action.model_copy(update=update))
    workloads = [w.model_copy(update={"replicas": _halved(w.replicas)}) for w in scenario.workloads]
    return scenario.model_copy(update={"timeline": timeline, "workloads": workloads})


@pytest.fixture(scope="module")
def report() -> SoakReport:
    return soak(small(load_scenario("soak-day")), hours=HOURS, watch_history=500)


@pytest.mark.timeout(300)
def test_every_invariant_holds_at_every_hour_and_every_pod_is_bound(report: SoakReport) -> None:
    assert [c.hour for c in report.checkpoints] == [1.0, 2.0, 3.0]
    assert report.violations() == []
    assert report.errors == []
    for checkpoint in report.checkpoints:
        # The series end each hour where they began: 3 web, 1 api, 0 batch, 2 cache, 1 spread.
        assert (checkpoint.pods_bound, checkpoint.pods_pending) == (7, 0)
    # The churn really churned: consolidation, drift and expiry all replaced nodes.
    assert report.disruptions.get("underutilized", 0) + report.disruptions.get("empty", 0) > 10
    assert report.disruptions.get("drifted", 0) > 0
    assert report.disruptions.get("expired", 0) > 0


@pytest.mark.timeout(300)
def test_the_controllers_memory_does_not_grow_from_hour_to_hour(report: SoakReport) -> None:
    first = report.checkpoints[0].memory["controller_bytes"]
    for checkpoint in report.checkpoints[1:]:
        assert checkpoint.memory["controller_bytes"] <= first * (1 + MEMORY_BAND), (
            checkpoint.hour,
            report.controller_growth[:5],
        )


@pytest.mark.timeout(300)
def test_the_controllers_requests_per_hour_stay_flat(report: SoakReport) -> None:
    per_hour = report.requests_per_hour()
    first = per_hour[0]
    assert first > 1000  # the controller did work: every hour launches and drains nodes
    for hour, count in enumerate(per_hour[1:], start=2):
        assert abs(count - first) <= REQUEST_BAND * first, (hour, per_hour)
