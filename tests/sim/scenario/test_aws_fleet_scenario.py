"""The shipped ``aws-fleet`` scenario, as a user running ``karpenter-capi simulate aws-fleet``
would judge it: every pod bound on nodes of real EC2 instance types launched through EC2 Fleet
and adopted by (emulated) stock CAPA, priced from the scenario's price book; the cheapest spot
offering short of capacity once and the NodeClaim falling back; the shrunken api workload's
node replaced by a cheaper one through the same native path; one Fleet call per node plus the
retry.
"""

from __future__ import annotations

import functools
import io
import sys
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from karpenter_capi.cli import main
from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES, PODS
from karpenter_capi.plugins.capa.adopt import aws_machines
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.capi.objects import capi_resources
from karpenter_capi.sim.scenario.result import ScenarioResult
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import load_scenario

pytest.importorskip("moto")

AWS_MACHINES = aws_machines("infrastructure.cluster.x-k8s.io/v1beta2")
_, _, MACHINES, _ = capi_resources("v1beta2")


@functools.cache
def _run() -> tuple[ScenarioResult, InMemoryAPIServer]:
    servers: list[InMemoryAPIServer] = []
    result = run(load_scenario("aws-fleet"), until=480, on_cluster=servers.append)
    return result, servers[0]


def _live(server: InMemoryAPIServer, resource: Any, namespace: str | None = None) -> list[Any]:
    return [
        o
        for o in server.list(resource, namespace).items
        if not o["metadata"].get("deletionTimestamp")
    ]


def test_every_pod_is_bound_on_a_node_of_a_real_instance_type_adopted_by_capa() -> None:
    result, server = _run()
    assert result.errors == []
    assert result.pods_bound == result.pods_total == 5
    nodes = _live(server, NODES)
    labels = [n["metadata"]["labels"] for n in nodes]
    assert sorted(
        (lb[wellknown.LABEL_INSTANCE_TYPE], lb[wellknown.LABEL_CAPACITY_TYPE]) for lb in labels
    ) == [("c5.large", "on-demand"), ("c5.large", "spot"), ("c5.large", "spot")]
    # Each Node is an EC2 instance: CAPA's provider ID, the instance's private DNS name, and
    # the capacity EC2 describes for c5.large (2 vCPU, 4 GiB; max-pods from the kubeadm config).
    for node in nodes:
        assert node["spec"]["providerID"].startswith("aws:///us-east-1")
        assert node["metadata"]["name"].endswith(".ec2.internal")
        assert node["status"]["capacity"]["cpu"] == "2"
        assert node["status"]["capacity"]["memory"] == "4096Mi"
        assert node["status"]["capacity"]["pods"] == "58"
    # kubectl get machines stays the truth: one Machine and one AWSMachine per Node, naming it.
    machines = _live(server, MACHINES, "capi")
    assert sorted(m["spec"]["providerID"] for m in machines) == sorted(
        n["spec"]["providerID"] for n in nodes
    )
    assert all(m["status"]["phase"] == "Running" for m in machines)
    aws = {a["metadata"]["name"]: a for a in _live(server, AWS_MACHINES, "capi")}
    for machine in machines:
        awsm = aws[machine["spec"]["infrastructureRef"]["name"]]
        assert awsm["spec"]["providerID"] == machine["spec"]["providerID"]
        assert awsm["status"]["ready"] is True
    # Pods sit where their nodeSelector sent them.
    capacity_of = {
        n["metadata"]["name"]: lb[wellknown.LABEL_CAPACITY_TYPE]
        for n, lb in zip(nodes, labels, strict=True)
    }
    placed = Counter(
        (p["metadata"]["labels"]["app"], capacity_of[p["spec"]["nodeName"]])
        for p in _live(server, PODS, "default")
    )
    assert placed == {("batch", "spot"): 4, ("api", "on-demand"): 1}


def test_cost_comes_from_the_price_book() -> None:
    result, _ = _run()
    aws = load_scenario("aws-fleet").infrastructure.aws
    assert aws is not None
    on_demand = aws.on_demand_prices["c5.large"]
    spot_b = aws.spot_prices["c5.large"]["us-east-1b"]
    assert result.cost_per_hour == pytest.approx(on_demand + 2 * spot_b)
    assert [
        (r.instance_type, r.capacity_type, r.count, r.price_per_hour) for r in result.capacity
    ] == [
        ("c5.large", "on-demand", 1, pytest.approx(on_demand)),
        ("c5.large", "spot", 2, pytest.approx(spot_b)),
    ]


def test_the_cheapest_spot_offering_short_of_capacity_falls_back_to_the_next() -> None:
    result, _ = _run()
    figures = result.native_launch
    assert figures["fleet_capacity_errors"] == 1
    spot = [i for i in figures["instances"] if i["capacity_type"] == "spot"]
    # c5.large in us-east-1a is the cheapest spot offering and was refused: both spot nodes are
    # the next cheapest, c5.large in us-east-1b, and nothing was launched in the refused pool.
    assert [(i["instance_type"], i["zone"], i["state"]) for i in spot] == [
        ("c5.large", "us-east-1b", "running"),
        ("c5.large", "us-east-1b", "running"),
    ]


def test_consolidation_replaces_the_api_node_through_the_fleet_and_capa_terminates_it() -> None:
    result, server = _run()
    assert result.disruptions == {"Underutilized": 1}
    before = next(s for s in result.samples if s.at == 300)
    assert before.nodes_by_instance_type == {"c5.large": 2, "c5.xlarge": 1}
    assert result.samples[-1].nodes_by_instance_type == {"c5.large": 3}
    assert result.cost_per_hour < before.cost_per_hour
    on_demand = [
        (i["instance_type"], i["state"])
        for i in result.native_launch["instances"]
        if i["capacity_type"] == "on-demand"
    ]
    assert sorted(on_demand) == [("c5.large", "running"), ("c5.xlarge", "terminated")]
    # The old NodeClaim, its Machine and AWSMachine are gone; no Machine lacks an instance.
    assert len(_live(server, NODECLAIMS)) == 3
    assert len(server.list(MACHINES, "capi").items) == 3
    assert len(server.list(AWS_MACHINES, "capi").items) == 3


def test_one_fleet_call_per_node_plus_the_retry_and_capa_never_launches_its_own() -> None:
    result, _ = _run()
    figures = result.native_launch
    launched = figures["nodes_launched"]
    assert launched == 4  # two spot, the first api node, its replacement
    assert figures["fleet_calls"] == launched + figures["fleet_capacity_errors"] == 5
    assert figures["fleet_calls_per_node"] == pytest.approx(1.25)
    assert figures["instances_launched_by_capa"] == 0
    # Per node, its CreateFleet: the launch template is the NodeClass's, written once; the
    # only other writes are the terminations of the replaced node and the GC.
    assert figures["ec2_writes"]["CreateFleet"] == 5
    assert figures["ec2_writes"]["CreateLaunchTemplate"] == 1
    assert set(figures["ec2_writes"]) <= {
        "CreateFleet",
        "CreateLaunchTemplate",
        "TerminateInstances",
    }
    assert figures["instances_live"] == 3
    assert figures["kube_writes"] > 0
    assert figures["kube_writes_per_node"] == pytest.approx(
        figures["kube_writes"] / launched, abs=1e-3
    )
    assert result.to_json()["native_launch"]["fleet_calls_per_node"] == pytest.approx(1.25)


def test_simulate_says_how_to_get_moto_when_it_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "moto", None)  # import moto raises ImportError
    assert main(["simulate", "aws-fleet", "--until", "1m"], out=io.StringIO()) == 1
    error = capsys.readouterr().err
    assert "scenario aws-fleet" in error
    assert "moto, which is not installed" in error
    assert "pip install 'karpenter-capi[sim]'" in error


def test_the_all_extra_brings_what_simulate_aws_fleet_needs() -> None:
    """``pip install 'karpenter-capi[all]'`` then ``simulate aws-fleet``: moto and boto3 come
    with it, through the ``sim`` extra the error names."""
    pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    wanted, todo = set[str](), ["all"]
    while todo:
        for requirement in extras[todo.pop()]:
            if requirement.startswith("karpenter-capi["):
                todo.extend(requirement[len("karpenter-capi[") : -1].split(","))
            else:
                wanted.add(requirement.partition(">")[0])
    assert {"moto[ec2]", "boto3"} <= wanted


def test_simulate_aws_fleet_prints_the_fleet_figures() -> None:
    out = io.StringIO()
    assert main(["simulate", "aws-fleet", "--until", "1m"], out=out) == 0
    text = out.getvalue()
    assert "native launch (EC2 Fleet):" in text
    assert "Fleet calls per launched node" in text
    assert "0 launched by CAPA itself" in text
