"""The figures a run reports beyond pods and cost: API requests, disruptions, pacing."""

from __future__ import annotations

import copy
import json
import logging
import urllib.request
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.events import EventRecorder
from karpenter_capi.core.kube.resources import NODECLAIMS, PODS
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.plugins.generic_capi.binding import ANNOTATION_SCALABLE_RESOURCE
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from karpenter_capi.plugins.generic_capi.shape import PRICE_ANNOTATION
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.scenario import observer as observer_module
from karpenter_capi.sim.scenario.catalog import generate_catalog
from karpenter_capi.sim.scenario.observer import Observer
from karpenter_capi.sim.scenario.plans import BeyondPlan
from karpenter_capi.sim.scenario.result import Sample
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import Catalog, load_scenario


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "pause"}]},
    }


def test_the_api_server_counts_requests_by_verb_in_process_and_over_http() -> None:
    server = InMemoryAPIServer()
    before = server.requests.snapshot()
    server.create(PODS, _pod("a"), "default")
    server.get(PODS, "a", "default")
    server.list(PODS, "default")
    server.patch(PODS, "a", {"metadata": {"labels": {"x": "y"}}}, "default")
    server.patch(PODS, "a", {"status": {"phase": "Running"}}, "default", subresource="status")
    server.evict("a", "default")
    assert server.requests.since(before) == {
        "create": 1,
        "create/eviction": 1,
        "get": 1,
        "list": 1,
        "patch": 1,
        "patch/status": 1,
    }
    before = server.requests.snapshot()
    with HttpFront(server, host="127.0.0.1", port=0) as front:
        with urllib.request.urlopen(f"{front.url}/api/v1/namespaces/default/pods") as reply:
            assert json.load(reply)["kind"] == "PodList"
        with urllib.request.urlopen(f"{front.url}/api") as reply:  # discovery: not counted
            reply.read()
    assert server.requests.since(before) == {"list": 1}


def test_a_run_reports_the_api_requests_the_controllers_made() -> None:
    result = run(load_scenario("scale-from-zero"), until=60)
    requests = result.to_json()["api_requests"]
    # The controllers created NodeClaims and Machines and wrote statuses.
    assert requests["create"] > 0
    assert requests["patch/status"] > 0
    assert all(count > 0 for count in requests.values())
    # The stepped informers only poll (zero-timeout watches): reported apart, not as watches.
    assert "watch" not in requests
    assert "watch/poll" not in requests
    assert result.to_json()["watch_polls"] == result.watch_polls > sum(requests.values())


def test_zero_timeout_watches_are_polls_and_long_watches_count_once() -> None:
    server = InMemoryAPIServer()
    before = server.requests.snapshot()
    for _ in range(3):
        server.watch(PODS, timeout_seconds=0).close()
    server.watch(PODS, timeout_seconds=60).close()
    server.watch(PODS).close()
    assert server.requests.since(before) == {"watch": 2, "watch/poll": 3}


def _claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name},
        "spec": {
            "nodeClassRef": {
                "group": wellknown.NODECLASS_GROUP,
                "kind": wellknown.NODECLASS_KIND,
                "name": "not-there",
            },
            "requirements": [],
        },
    }


def _disrupt(server: InMemoryAPIServer, name: str, reason: str | None) -> None:
    """Mark a NodeClaim as the disruption controller does (``None``: withdraw the mark)."""
    condition = {
        "type": "DisruptionReason",
        "status": "True",
        "reason": reason,
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    conditions = [condition] if reason else []
    server.patch(NODECLAIMS, name, {"status": {"conditions": conditions}}, subresource="status")


def test_disruptions_count_nodeclaims_deleted_while_marked_even_between_samples() -> None:
    servers: list[InMemoryAPIServer] = []
    taken: list[Sample] = []

    def on_sample(sample: Sample) -> None:
        taken.append(sample)
        server = servers[0]
        if sample.at == 15:
            # Marked and deleted between two samples: the watch still sees it.
            server.create(NODECLAIMS, _claim("emptied"))
            _disrupt(server, "emptied", "Empty")
            server.delete(NODECLAIMS, "emptied")
            # Marked and not (yet) deleted: in flight, counted.
            server.create(NODECLAIMS, _claim("drifted"))
            _disrupt(server, "drifted", "Drifted")
            server.create(NODECLAIMS, _claim("rolled-back"))
            _disrupt(server, "rolled-back", "Underutilized")
        elif sample.at == 30:
            # The controller gave up on it: not a disruption after all.
            _disrupt(server, "rolled-back", None)

    result = run(
        load_scenario("scale-from-zero"),
        until=60,
        on_cluster=servers.append,
        on_sample=on_sample,
    )
    assert result.disruptions == {"Drifted": 1, "Empty": 1}
    assert result.to_json()["disruptions"] == result.disruptions
    by_time = {sample.at: sample.disruptions for sample in result.samples}
    assert by_time[15] == {}
    assert by_time[30] == {"Drifted": 1, "Empty": 1, "Underutilized": 1}
    assert by_time[45] == by_time[60] == result.disruptions
    assert taken == result.samples


def test_a_pacer_sees_virtual_time_advance_in_steps() -> None:
    paced: list[float] = []
    result = run(load_scenario("scale-from-zero"), until=30, pace=paced.append, pace_step=5)
    assert paced == [0, 5, 10, 15, 20, 25, 30]  # 0: setup is done, the loop starts
    assert result.virtual_seconds == 30


def test_nodeclaims_are_counted_by_state_in_each_sample() -> None:
    result = run(load_scenario("scale-from-zero"), until=120)
    last = result.samples[-1]
    assert last.nodeclaims_by_state["initialized"] == result.nodeclaims > 0
    # ``nodeclaims`` leaves out those being deleted (consolidation may be under way at 120 s).
    deleting = last.nodeclaims_by_state["deleting"]
    assert sum(last.nodeclaims_by_state.values()) == result.nodeclaims + deleting
    assert sum(row.count for row in result.capacity) == result.nodeclaims
    assert round(sum(row.cost_per_hour for row in result.capacity), 6) == result.cost_per_hour


def test_disruptions_survive_a_watch_history_that_expired_between_samples() -> None:
    server = InMemoryAPIServer(clock=FakeClock())
    server.apply_manifests(generate_crds())
    server.register_cluster_api()
    observer = Observer(server, FakeClock())
    server.create(NODECLAIMS, _claim("emptied"))
    _disrupt(server, "emptied", "Empty")
    assert observer.sample().disruptions == {"Empty": 1}  # in flight
    server.delete(NODECLAIMS, "emptied")
    server.compact()  # the watch must relist: the deletion is known only by its absence
    assert observer.sample().disruptions == {"Empty": 1}
    # Five lists a sample (pods, MachineDeployments, MachinePools, NodeClaims, Nodes) + a relist
    # for the disruptions and one for the launches beyond the plan (sim.scenario.plans).
    assert observer.own_requests["list"] == 2 * 5 + 2
    # Per sample: disruptions, then the plans' NodeClaims.
    assert observer.own_requests["watch/poll"] == 2 + 2


def _planned(name: str, *pods: str) -> dict[str, Any]:
    """A NodeClaim as a provisioning round creates it, with the pods it was launched for."""
    claim = _claim(name)
    keys = ",".join(sorted(f"default/{pod}" for pod in pods))
    claim["metadata"]["annotations"] = {wellknown.ANNOTATION_NOMINATED_PODS: keys}
    return claim


def test_a_pod_planned_again_while_its_nodeclaim_lives_is_stranded() -> None:
    clock = FakeClock()
    server = InMemoryAPIServer(clock=clock)
    server.apply_manifests(generate_crds())
    server.register_cluster_api()
    observer = Observer(server, clock)
    server.create(NODECLAIMS, _claim("standing"))  # launched for no pod of ours
    server.create(NODECLAIMS, _planned("a", "p", "q", "s"))
    doomed = _planned("b", "r")
    doomed["metadata"]["finalizers"] = ["karpenter.sh/termination"]
    server.create(NODECLAIMS, doomed)
    observer.sample()
    assert observer.plans.result() == BeyondPlan(0, 0)

    # p: planned again while a lives (between two samples, in one go): stranded, c beyond.
    server.create(NODECLAIMS, _planned("c", "p"))
    # r: planned again once b is being deleted: a new plan, not a stranding.
    server.delete(NODECLAIMS, "b")
    server.create(NODECLAIMS, _planned("d", "r"))
    _disrupt(server, "a", None)  # a changes: the same plan seen again, not a new one
    observer.sample()
    assert observer.plans.result() == BeyondPlan(nodeclaims_beyond_plan=1, pods_stranded=1)

    # q and s planned together onto e while a lives: two more stranded pods, one NodeClaim.
    server.create(NODECLAIMS, _planned("e", "q", "s"))
    observer.sample()
    assert observer.plans.result() == BeyondPlan(nodeclaims_beyond_plan=2, pods_stranded=3)


def test_nominated_events_are_not_where_the_plan_is_read() -> None:
    """Upstream drops most of a big round's ``Nominated`` Events: a plan told by Events alone
    is not one the follower counts, so its figures do not depend on the rate limiter."""
    clock = FakeClock()
    server = InMemoryAPIServer(clock=clock)
    server.apply_manifests(generate_crds())
    server.register_cluster_api()
    recorder = EventRecorder(server, clock)
    observer = Observer(server, clock)
    p = server.create(PODS, _pod("p"), "default")
    server.create(NODECLAIMS, _planned("a", "p"))
    recorder.record(p, "Normal", "Nominated", "Pod should schedule on: nodeclaim/a")
    server.create(NODECLAIMS, _claim("c"))
    recorder.record(p, "Normal", "Nominated", "Pod should schedule on: nodeclaim/c")
    observer.sample()
    assert observer.plans.result() == BeyondPlan(0, 0)


def test_each_sample_counts_nodes_by_instance_type() -> None:
    # 40 s: every node up, none going away yet (consolidateAfter is 30 s after binding).
    result = run(load_scenario("scale-from-zero"), until=40)
    last = result.samples[-1]
    assert sum(last.nodes_by_instance_type.values()) == last.nodes > 0
    by_type: dict[str, int] = {}
    for row in result.capacity:
        by_type[row.instance_type] = by_type.get(row.instance_type, 0) + row.count
    assert last.nodes_by_instance_type == by_type
    assert result.to_json()["samples"][-1]["nodes_by_instance_type"] == by_type
    assert result.samples[0].nodes_by_instance_type == {}  # no node yet at 0 s


def test_nodeclaims_are_priced_from_the_inventory_with_the_annotation_as_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    server = InMemoryAPIServer(clock=clock)
    server.apply_manifests(generate_crds())
    server.register_cluster_api()
    catalog = Catalog.model_validate({"cpus": [2], "families": {"c": 2}, "zones": ["zone-a"]})
    manifests = generate_catalog(catalog)
    # Not opted in, so in no inventory: only its price annotation prices what it launched.
    outsider = copy.deepcopy(next(m for m in manifests if m["kind"] == "MachineDeployment"))
    outsider["metadata"]["name"] = "outsider"
    outsider["metadata"]["labels"] = {}
    outsider["metadata"]["annotations"][PRICE_ANNOTATION] = "0.5"
    server.apply_manifests([*manifests, outsider])
    environment = PluginEnvironment(
        workload=server, management=server, clock=clock, logger=logging.getLogger("test")
    )
    plugins = Plugins.from_objects([("generic_capi", GenericCapiPlugin)], environment)
    resolved: list[int] = []
    real_resolve = observer_module.resolve_inventory

    def counting_resolve(client: Any, plugins: Plugins) -> Any:
        resolved.append(1)
        return real_resolve(client, plugins)

    monkeypatch.setattr(observer_module, "resolve_inventory", counting_resolve)
    observer = Observer(server, clock, plugins)
    assert observer.sample().cost_per_hour == 0
    assert resolved == []  # no NodeClaim to price: nothing resolved

    def priced(name: str, zone: str, resource: str | None) -> None:
        claim = _claim(name)
        claim["metadata"]["labels"] = {
            wellknown.LABEL_NODEPOOL: "catalog",
            wellknown.LABEL_INSTANCE_TYPE: "c-2x-amd64-linux",
            wellknown.LABEL_TOPOLOGY_ZONE: zone,
            wellknown.LABEL_CAPACITY_TYPE: "on-demand",
        }
        if resource is not None:
            claim["metadata"]["annotations"] = {ANNOTATION_SCALABLE_RESOURCE: resource}
        server.create(NODECLAIMS, claim)

    priced("offered", "zone-a", None)  # in the inventory: 2 * 0.025 + 4 * 0.001
    priced("elsewhere", "zone-z", "MachineDeployment/default/outsider")  # annotation
    priced("unknown", "zone-z", None)  # neither: 0
    before = server.requests.snapshot()
    sample = observer.sample()
    assert sample.cost_per_hour == 0.554
    assert resolved == [1]  # once for the three NodeClaims
    assert {(r.instance_type, r.count, r.price_per_hour) for r in observer.capacity()} == {
        ("c-2x-amd64-linux", 1, 0.054),
        ("c-2x-amd64-linux", 1, 0.5),
        ("c-2x-amd64-linux", 1, 0.0),
    }
    # The resolution's reads are the observer's own, left out of the run's figures.
    spent = server.requests.since(before)
    assert spent.get("get", 0) > 0
    assert all(observer.own_requests.get(verb, 0) >= n for verb, n in spent.items())
