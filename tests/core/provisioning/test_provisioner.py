"""A provisioning round against the in-memory API: the NodeClaims and Events a user would see."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import EVENTS, NODECLAIMS, NODEPOOLS, PODS
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.provisioning import nodeclaims as nodeclaims_module
from karpenter_capi.core.provisioning.batcher import Batcher
from karpenter_capi.core.provisioning.provisioner import Provisioner
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.demo import DEMO_SCENARIO, mark_unschedulable
from karpenter_capi.sim.manifests import load_manifest_files
from tests.support.joining import join_node


@pytest.fixture
def cluster() -> tuple[InMemoryAPIServer, Provisioner, FakeClock]:
    clock = FakeClock()
    server = new_cluster(clock=clock)
    server.apply_manifests(load_manifest_files([Path(DEMO_SCENARIO)]))
    mark_unschedulable(server)
    return server, _provisioner(server, clock), clock


def _provisioner(server: InMemoryAPIServer, clock: FakeClock) -> Provisioner:
    plugins = Plugins.load(
        ["generic_capi"],
        PluginEnvironment(
            workload=server, management=server, clock=clock, logger=logging.getLogger("t")
        ),
    )
    return Provisioner(server, plugins, clock)


def _events(server: InMemoryAPIServer, reason: str) -> list[dict[str, Any]]:
    return [e for e in server.list(EVENTS).items if e.get("reason") == reason]


def test_nodeclaims_carry_what_karpenter_puts_on_them(
    cluster: tuple[InMemoryAPIServer, Provisioner, FakeClock],
) -> None:
    server, provisioner, _ = cluster
    report = provisioner.reconcile()
    assert report.launched
    pool = server.get(NODEPOOLS, "general")
    claims = server.list(NODECLAIMS).items
    assert len(claims) == len(report.launched)
    for claim in claims:
        meta, spec = claim["metadata"], claim["spec"]
        assert meta["name"].startswith("general-")
        assert meta["labels"][wellknown.LABEL_NODEPOOL] == "general"
        assert meta["ownerReferences"][0]["uid"] == pool["metadata"]["uid"]
        assert meta["annotations"][wellknown.ANNOTATION_NODEPOOL_HASH]
        keys = {r["key"]: r for r in spec["requirements"]}
        assert keys[wellknown.LABEL_INSTANCE_TYPE]["operator"] == "In"
        assert keys[wellknown.LABEL_CAPACITY_TYPE]["values"] == ["on-demand"]
        assert wellknown.LABEL_HOSTNAME not in keys  # the solver's placeholder stays inside
        assert spec["resources"]["requests"]["cpu"]
        assert spec["nodeClassRef"]["kind"] == "ClusterAPINodeClass"
    # Which pods each claim is for, where a restarted controller finds it.
    written = {c["metadata"]["name"]: c["metadata"]["annotations"] for c in claims}
    for decision in report.launched:
        nominated = written[decision.nodeclaim][wellknown.ANNOTATION_NOMINATED_PODS]
        assert nominated == ",".join(decision.pods)


def test_every_provisioned_pod_gets_a_nominated_event_and_the_rest_a_reason(
    cluster: tuple[InMemoryAPIServer, Provisioner, FakeClock],
) -> None:
    server, provisioner, _ = cluster
    report = provisioner.reconcile()
    # Upstream's shared bucket (burst 10) tells the first 10; the plan is on the NodeClaims.
    nominated = {e["involvedObject"]["name"] for e in _events(server, "Nominated")}
    launched = {pod.split("/")[1] for d in report.launched for pod in d.pods}
    assert nominated <= launched
    assert len(nominated) == min(10, len(launched))
    failed = _events(server, "FailedScheduling")
    assert [e["involvedObject"]["name"] for e in failed] == ["too-big"]
    assert "NodePool general" in failed[0]["message"]
    # A second round repeats the reason on the same Event instead of adding one.
    provisioner.reconcile()
    again = _events(server, "FailedScheduling")
    assert len(again) == 1
    assert again[0]["count"] == 2


def test_a_second_round_does_not_launch_for_pods_already_provided_for(
    cluster: tuple[InMemoryAPIServer, Provisioner, FakeClock],
) -> None:
    _, provisioner, _ = cluster
    first = provisioner.reconcile()
    second = provisioner.reconcile()
    assert not second.launched
    assert second.in_flight_pods == sum(len(d.pods) for d in first.launched)


def test_the_plan_is_where_the_last_round_placed_each_pending_pod(
    cluster: tuple[InMemoryAPIServer, Provisioner, FakeClock],
) -> None:
    """What ``nominations.NominationController`` nominates: launched or counted, per pod."""
    _, provisioner, _ = cluster
    assert provisioner.planned() is None  # no round yet: the NodeClaims say it
    first = provisioner.reconcile()
    launched = {key: d.nodeclaim for d in first.launched for key in d.pods}
    assert launched
    assert provisioner.planned() == launched
    provisioner.reconcile()  # the same pods, counted on the claims now launching
    assert provisioner.planned() == launched


def test_too_many_pods_to_write_on_a_claim_are_kept_in_memory_only(
    cluster: tuple[InMemoryAPIServer, Provisioner, FakeClock], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, provisioner, _ = cluster
    monkeypatch.setattr(nodeclaims_module, "NOMINATED_PODS_MAX_CHARS", 10)
    first = provisioner.reconcile()
    assert first.launched
    for claim in server.list(NODECLAIMS).items:
        assert wellknown.ANNOTATION_NOMINATED_PODS not in claim["metadata"]["annotations"]
    assert not provisioner.reconcile().launched


def test_nodepool_limits_stop_provisioning_part_way(
    cluster: tuple[InMemoryAPIServer, Provisioner, FakeClock],
) -> None:
    server, provisioner, _ = cluster
    unlimited = len(provisioner.reconcile().launched)
    for claim in server.list(NODECLAIMS).items:
        server.delete(NODECLAIMS, claim["metadata"]["name"])
    limited = copy.deepcopy(server.get(NODEPOOLS, "general"))
    limited["spec"]["limits"] = {"cpu": "12"}
    server.update(NODEPOOLS, limited)
    fresh = _provisioner(server, FakeClock())  # no nominations remembered
    report = fresh.reconcile()
    assert 0 < len(report.launched) < unlimited
    limited_out = [r for r in report.unschedulable.values() if "limits" in r]
    assert limited_out


def test_an_invalid_nodepool_is_reported_and_the_others_still_work(
    cluster: tuple[InMemoryAPIServer, Provisioner, FakeClock],
) -> None:
    server, provisioner, _ = cluster
    broken = copy.deepcopy(server.get(NODEPOOLS, "general"))
    broken["metadata"] = {"name": "broken"}
    broken["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "missing"
    broken["spec"]["weight"] = 100
    server.create(NODEPOOLS, broken)
    report = provisioner.reconcile()
    assert "broken" in report.nodepool_errors
    assert "not found" in report.nodepool_errors["broken"]
    assert report.launched
    warnings = _events(server, "NodePoolNotReady")
    assert [e["involvedObject"]["name"] for e in warnings] == ["broken"]


def test_a_nodepool_error_is_logged_once_while_it_lasts_and_again_when_it_changes(
    cluster: tuple[InMemoryAPIServer, Provisioner, FakeClock],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, provisioner, _ = cluster
    broken = copy.deepcopy(server.get(NODEPOOLS, "general"))
    broken["metadata"] = {"name": "broken"}
    broken["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "missing"
    server.create(NODEPOOLS, broken)

    def warnings() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING and r.getMessage().startswith("NodePool broken")
        ]

    with caplog.at_level(logging.DEBUG, logger="karpenter_capi"):
        for _ in range(3):
            provisioner.reconcile()
        assert len(warnings()) == 1
        assert "not found" in warnings()[0]
        broken = server.get(NODEPOOLS, "broken")
        broken["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "gone"
        server.update(NODEPOOLS, broken)
        provisioner.reconcile()
    assert len(warnings()) == 2
    assert "gone" in warnings()[1]


def test_bound_pods_are_not_provisioned_for(
    cluster: tuple[InMemoryAPIServer, Provisioner, FakeClock],
) -> None:
    server, provisioner, _ = cluster
    pods = server.list(PODS).items
    for pod in pods:
        server.delete(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
    report = provisioner.reconcile()
    assert report.pending == 0
    assert not server.list(NODECLAIMS).items


def test_the_batch_window_extends_with_new_pods_up_to_its_maximum() -> None:
    clock = FakeClock()
    batcher = Batcher(clock, idle=1.0, max_duration=10.0)
    assert not batcher.ready()
    batcher.observe(["default/a"])
    clock.advance(0.5)
    assert not batcher.ready()
    batcher.observe(["default/a", "default/b"])  # a new pod: wait another second
    clock.advance(0.9)
    assert not batcher.ready()
    clock.advance(0.1)
    assert batcher.ready()
    batcher.reset()
    batcher.observe(["default/c"])
    steps = 0
    while not batcher.ready():  # a new pod every half second cannot hold it open past 10 s
        clock.advance(0.5)
        steps += 1
        batcher.observe([f"default/t{i}" for i in range(steps + 1)])
    assert steps == 20


def test_a_batch_window_must_make_sense() -> None:
    with pytest.raises(ValueError, match="idle"):
        Batcher(FakeClock(), idle=5, max_duration=1)


def test_a_dry_run_decides_but_writes_nothing(
    cluster: tuple[InMemoryAPIServer, Provisioner, FakeClock],
) -> None:
    server, _, clock = cluster
    plugins = Plugins.load(
        ["generic_capi"],
        PluginEnvironment(
            workload=server,
            management=server,
            clock=clock,
            logger=logging.getLogger("t"),
            dry_run=True,
        ),
    )
    report = Provisioner(server, plugins, clock, dry_run=True).reconcile()
    assert report.launched
    assert all(d.nodeclaim == "(dry run)" for d in report.launched)
    assert not server.list(NODECLAIMS).items
    assert not server.list(EVENTS).items


def test_a_round_reports_metrics(
    cluster: tuple[InMemoryAPIServer, Provisioner, FakeClock],
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from karpenter_capi.core.observability.metrics import Metrics

    server, _, clock = cluster
    metrics = Metrics(clock)
    plugins = Plugins.load(
        ["generic_capi"],
        PluginEnvironment(
            workload=server, management=server, clock=clock, logger=logging.getLogger("t")
        ),
    )
    report = Provisioner(server, plugins, clock, metrics=metrics).reconcile()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }
    created = sum(
        v for (n, labels), v in samples.items() if n == "karpenter_nodeclaims_created_total"
    )
    assert created == len(report.launched)
    assert any(n == "karpenter_scheduler_scheduling_duration_seconds_count" for n, _ in samples)
    assert any(
        n == "karpenter_nodepools_usage" and ("nodepool", "general") in labels
        for n, labels in samples
    )


def _land(server: InMemoryAPIServer, claim_name: str, pods: tuple[str, ...]) -> str:
    """The claim's Node joins, Ready, and the pods it was launched for are bound to it."""
    node_name = join_node(server, claim_name)
    for key in pods:
        namespace, name = key.split("/")
        # Bound, and made by a controller that makes it again once it is evicted.
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u"}
        server.patch(
            PODS,
            name,
            {"metadata": {"ownerReferences": [{**owner, "controller": True}]}},
            namespace,
        )
        binding = {"metadata": {"name": name}, "target": {"kind": "Node", "name": node_name}}
        server.bind(binding, namespace)
        server.patch(PODS, name, {"status": {"phase": "Running"}}, namespace, subresource="status")
    return node_name


@pytest.mark.parametrize("how", ["deleting", "interrupted"])
def test_the_pods_of_a_node_going_away_get_a_replacement_before_they_are_evicted(
    cluster: tuple[InMemoryAPIServer, Provisioner, FakeClock], how: str
) -> None:
    """Upstream launches for the pods of deleting nodes; an interrupted node's too."""
    server, provisioner, _ = cluster
    first = provisioner.reconcile()
    decision = first.launched[0]
    _land(server, decision.nodeclaim, decision.pods)
    for other in first.launched[1:]:
        _land(server, other.nodeclaim, other.pods)
    assert not provisioner.reconcile().launched, "everything runs: nothing to do"
    if how == "deleting":
        server.patch(NODECLAIMS, decision.nodeclaim, {"metadata": {"finalizers": ["test/hold"]}})
        server.delete(NODECLAIMS, decision.nodeclaim)
    else:
        server.patch(
            NODECLAIMS,
            decision.nodeclaim,
            {"metadata": {"annotations": {wellknown.ANNOTATION_INTERRUPTION: "spot_interrupted"}}},
        )
    report = provisioner.reconcile()
    assert report.launched, "the replacement is launched while the pods still run"
    assert {p for d in report.launched for p in d.pods} == set(decision.pods)
    planned = provisioner.planned() or {}
    assert {planned[p] for p in decision.pods} <= {d.nodeclaim for d in report.launched}
    assert not provisioner.reconcile().launched, "and only once"
