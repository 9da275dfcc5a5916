"""Each version of a pod is parsed once, however many provisioning rounds and consolidation
simulations read it (issue 27: parse once, at the edge)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from karpenter_capi.core.disruption.simulation import Simulator
from karpenter_capi.core.scheduling import podspec
from karpenter_capi.core.scheduling.existing_view import ExistingView
from karpenter_capi.core.scheduling.solver import Solver
from karpenter_capi.sim.scenario.schema import Catalog

from .sim_world import SimWorld

CATALOG = Catalog(cpus=[2, 4, 8], zones=["zone-a"], capacity_types=["on-demand"])


def _scaled_down_and_consolidated() -> SimWorld:
    """Eight 1.5-CPU pods scaled to two: rounds, then consolidation's passes and moves."""
    world = SimWorld.build(
        CATALOG,
        disruption={
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": "30s",
            "budgets": [{"nodes": "100%"}],
        },
    )
    world.deploy("web", 8, "1500m", "1Gi")
    world.advance(60)
    before = world.instance_types()
    world.scale("web", 2)
    world.advance(600)
    assert len(world.instance_types()) < len(before), "no consolidation happened"
    return world


def test_a_pod_version_is_parsed_once_across_rounds_and_a_consolidation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: Counter[tuple[str, str]] = Counter()
    solves = 0
    real_parse, real_solve = podspec.parse_pod, Solver.solve

    def counting_parse(
        pod: Mapping[str, Any], memo: podspec.ClassMemo | None = None
    ) -> podspec.PodSpec:
        meta = pod.get("metadata") or {}
        parsed[(str(meta.get("uid")), str(meta.get("resourceVersion")))] += 1
        return real_parse(pod, memo)

    def counting_solve(self: Solver, pods: Any) -> Any:
        nonlocal solves
        solves += 1
        return real_solve(self, pods)

    monkeypatch.setattr(podspec, "parse_pod", counting_parse)
    monkeypatch.setattr(Solver, "solve", counting_solve)
    world = _scaled_down_and_consolidated()
    assert world.events("DisruptionTerminating")
    assert solves >= 5, "too few rounds to show anything"
    assert parsed, "nothing was parsed through the cache"
    assert [version for version, count in parsed.items() if count > 1] == []


def test_passes_over_an_unchanged_cluster_reuse_its_solver_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = passes = 0
    real_view, real_init = ExistingView.__init__, Simulator.__init__

    def counting_view(self: ExistingView, *args: Any, **kwargs: Any) -> None:
        nonlocal built
        built += 1
        real_view(self, *args, **kwargs)

    def counting_simulator(self: Simulator, *args: Any, **kwargs: Any) -> None:
        nonlocal passes
        passes += 1
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(ExistingView, "__init__", counting_view)
    monkeypatch.setattr(Simulator, "__init__", counting_simulator)
    # The cluster changed (a scale-down, then consolidation's moves), and was still decided on.
    _scaled_down_and_consolidated()
    assert passes >= 10, "too few passes to show anything"
    # Between changes, a pass takes the last one's view instead of building its own.
    assert built < passes / 2
