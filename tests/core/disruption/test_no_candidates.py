"""A pass with nothing to simulate sets no simulator up, and decides as one that did.

Why: during a scale-up no node is drifted or consolidatable yet (launching, protected as the
provisioner's nominations, within ``consolidateAfter``, or of a NodePool that never
consolidates), yet every pass set up the simulator (the solver's view of every node) for
methods that had nothing to simulate. As upstream's ``Controller.disrupt`` moves on when
``GetCandidates`` finds no candidate its method admits, the planner now sets it up only when a
method may simulate (``methods.simulates``); what it would have kept for the next pass is
rebuilt from what that pass finds, by version.
And ``ask_providers`` validates each NodeClaim once per object version (``ClaimModels``),
not at every pass.
"""

from __future__ import annotations

import copy
from typing import Any

import pluggy
import pytest

from benchmarks import consolidation as bench
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.disruption import planner
from karpenter_capi.core.disruption.budgets import BudgetLedger
from karpenter_capi.core.disruption.methods import (
    DRIFT,
    EMPTINESS,
    MULTI_NODE,
    SINGLE_NODE,
    drift,
    emptiness,
    multi_node,
    single_node,
)
from karpenter_capi.core.disruption.planner import PassReport, PassSettings, plan
from karpenter_capi.core.disruption.refusals import ClaimModels, ask_providers
from karpenter_capi.core.disruption.simulation import Simulator
from karpenter_capi.core.disruption.staticdrift import STATIC_DRIFT, static_drift
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.provisioning.state import ClusterSnapshot, ParsedCluster
from karpenter_capi.sim.apiserver import InMemoryAPIServer

from .builders import Cluster, nodeclaim_object
from .test_incremental_passes import CHANGES, _decided, _reading

hookimpl = pluggy.HookimplMarker("karpenter_capi")


def _pass(
    snapshot: ClusterSnapshot,
    inventories: list[NodePoolInventory],
    parsed: ParsedCluster,
    protected: frozenset[str] = frozenset(),
) -> PassReport:
    return plan(
        snapshot,
        inventories,
        [],
        now=bench.NOW,
        clock=FakeClock(bench.NOW),
        protected=protected,
        settings=PassSettings(evaluate_all=True),
        parsed=parsed,
    )


def _everything(snapshot: ClusterSnapshot) -> frozenset[str]:
    return frozenset(str(n["metadata"]["name"]) for n in snapshot.nodes)


class _Counting(Simulator):
    made: list[Simulator] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _Counting.made.append(self)


def test_a_pass_without_candidates_sets_no_simulator_up_and_finds_what_the_methods_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    snapshot, inventories, _ = bench.build(20, seed=3)
    monkeypatch.setattr(_Counting, "made", [])
    monkeypatch.setattr(planner, "Simulator", _Counting)
    report = _pass(snapshot, inventories, ParsedCluster(), _everything(snapshot))

    assert report.candidates == []
    assert _Counting.made == []
    assert report.command is None
    assert report.simulations == 0
    assert set(report.excluded) == {str(c["metadata"]["name"]) for c in snapshot.nodeclaims}
    # What each method says of no candidates, simulator or not.
    simulator = Simulator(snapshot, inventories, FakeClock(bench.NOW))
    pools = {inv.nodepool: inv.model for inv in inventories if inv.model is not None}
    ledger = BudgetLedger(pools, snapshot.nodeclaims, snapshot.nodes, bench.NOW)
    never = lambda: False  # noqa: E731
    assert report.outcomes == {
        EMPTINESS: emptiness([], ledger, {}),
        STATIC_DRIFT: static_drift([], ledger, snapshot, {i.nodepool: i for i in inventories}),
        DRIFT: drift([], ledger, simulator),
        MULTI_NODE: multi_node([], ledger, simulator, expired=never),
        SINGLE_NODE: single_node([], ledger, simulator, expired=never),
    }
    assert report.budgets  # the budgets are still taken (the allowed-disruptions metric)

    # The same cluster with candidates: the simulator is set up, and a command is found.
    found = _pass(snapshot, inventories, ParsedCluster())
    assert found.candidates
    assert len(_Counting.made) == 1
    assert found.command is not None


def _not_yet(cluster: Cluster) -> None:
    """Candidates, none consolidatable yet (``consolidateAfter`` not elapsed)."""
    for name in ("a", "b", "c"):
        cluster.node(name, "large", consolidatable=False)
    cluster.pod("app-0", "a", cpu="1")
    cluster.pod("app-1", "b", cpu="1")


def _never(cluster: Cluster) -> None:
    """Consolidatable candidates of a NodePool with ``consolidateAfter: Never`` (the fleet
    benchmark's), one of them empty."""
    cluster.disruption = {**cluster.disruption, "consolidateAfter": "Never"}
    for name in ("a", "b", "c"):
        cluster.node(name, "large")
    cluster.pod("app-0", "a", cpu="1")
    cluster.pod("app-1", "b", cpu="1")


def _when_empty(cluster: Cluster) -> None:
    """A ``WhenEmpty`` NodePool's candidate with a pod, not consolidatable yet."""
    cluster.disruption = {**cluster.disruption, "consolidationPolicy": "WhenEmpty"}
    cluster.node("a", "large", consolidatable=False)
    cluster.pod("app-0", "a", cpu="1")


@pytest.mark.parametrize("build", [_not_yet, _never, _when_empty])
def test_candidates_no_method_simulates_for_are_judged_as_with_a_simulator(
    build: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = Cluster()
    build(cluster)
    monkeypatch.setattr(_Counting, "made", [])
    monkeypatch.setattr(planner, "Simulator", _Counting)

    report = cluster.plan(blocked={})
    assert report.candidates
    assert _Counting.made == []

    monkeypatch.setattr(planner, "simulates", lambda _candidates: True)
    reference = cluster.plan(blocked={})
    assert len(_Counting.made) == 1
    assert _decided(report) == _decided(reference)
    assert report.budgets == reference.budgets


@pytest.mark.parametrize("catalog", ["kwok", "capi"])
def test_passes_after_passes_without_candidates_decide_as_passes_from_scratch(
    catalog: str,
) -> None:
    snapshot, inventories, _ = bench.build(40, seed=3, removed=0.3, kind=catalog)
    kept = ParsedCluster()
    _pass(snapshot, inventories, kept)
    for index, change in enumerate(CHANGES):
        snapshot = change(snapshot)
        if index % 3 != 2:
            # Most passes find no candidate: the cluster changes under them meanwhile.
            quiet = _pass(snapshot, inventories, kept, _everything(snapshot))
            assert quiet.candidates == [], change.__name__
            assert quiet.command is None, change.__name__
            continue
        incremental = _pass(snapshot, inventories, kept)
        fresh_parsed = ParsedCluster()
        fresh = _pass(snapshot, inventories, fresh_parsed)
        assert _decided(incremental) == _decided(fresh), change.__name__
        assert _reading(kept) == _reading(fresh_parsed), change.__name__


class _Asked:
    """A plugin that records the models it is asked about and blocks none."""

    def __init__(self) -> None:
        self.asked: list[Any] = []

    @hookimpl
    def karpenter_capi_disruption_blocked(self, nodeclaims: list[Any]) -> dict[str, str]:
        self.asked = list(nodeclaims)
        return {}


def test_each_nodeclaim_version_is_validated_once_and_a_new_version_is_seen() -> None:
    clock = FakeClock()
    api = InMemoryAPIServer(clock=clock)
    plugin = _Asked()
    plugins = Plugins.from_objects(
        [("asked", plugin)], PluginEnvironment(workload=api, management=api, clock=clock)
    )
    models = ClaimModels()
    a, b = nodeclaim_object("a", version="1"), nodeclaim_object("b", version="1")

    ask_providers(plugins, [a, b], models)
    first = {c.metadata.name: c for c in plugin.asked}
    ask_providers(plugins, [a, b], models)

    assert models.validated == 2
    assert [c.metadata.name for c in plugin.asked] == ["a", "b"]
    assert all(c is first[c.metadata.name] for c in plugin.asked)

    # A new version of ``a`` (a label added) is validated again, and its change is seen.
    newer = copy.deepcopy(a)
    newer["metadata"]["resourceVersion"] = "2"
    newer["metadata"]["labels"] = {"team": "red"}
    ask_providers(plugins, [newer, b], models)
    assert models.validated == 3
    assert plugin.asked[0].metadata.labels == {"team": "red"}
    assert plugin.asked[1] is first["b"]

    # The same version as another object (a dry run's made-up status) is not taken for it.
    restated = copy.deepcopy(b)
    restated["status"] = {"nodeName": "node-b"}
    ask_providers(plugins, [newer, restated], models)
    assert models.validated == 4
    assert plugin.asked[1].status.node_name == "node-b"

    # What two passes did not ask about is dropped.
    ask_providers(plugins, [newer], models)
    ask_providers(plugins, [newer], models)
    ask_providers(plugins, [newer, restated], models)
    assert models.validated == 5
