"""The shipped ``aws-spot-interruption`` scenario: capa's native interruption path end to end.

EC2's spot interruption warnings arrive on moto's SQS queue as EventBridge delivers them; the
controller replaces the nodes before the two minutes end, no pod waits for a place, the
interrupted offering is not bought again, and every message is deleted from the queue.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.scenario.result import ScenarioResult
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import ScenarioError, load_scenario, parse_scenario

pytest.importorskip("moto")


@functools.cache
def _run() -> tuple[ScenarioResult, InMemoryAPIServer]:
    servers: list[InMemoryAPIServer] = []
    result = run(load_scenario("aws-spot-interruption"), until=300, on_cluster=servers.append)
    return result, servers[0]


def test_replacements_are_ready_before_the_deadline_and_no_pod_is_stranded() -> None:
    result, _ = _run()
    figures = result.spot_interruption
    assert figures["nodes_interrupted"] == 4
    assert figures["nodes_gone_before_deadline"] == 4
    assert figures["replacement_ready_before_deadline"] is True
    assert figures["replacement_ready_after_notice_seconds"] < 120
    assert figures["pods_moved"] == 10
    assert figures["pods_without_place"] == 0, figures
    assert figures["queue_messages_left"] == 0
    assert result.pods_bound == result.pods_total == 10
    assert result.errors == []
    assert result.beyond_plan.pods_stranded == 0
    summary = result.summary()
    assert "pods with no place to go longer than the boot  0 of 10 moved" in summary
    assert "interruption queue                             0 messages left" in summary


def test_interrupted_instances_are_gone_and_their_offering_is_not_bought_again() -> None:
    result, server = _run()
    instances: list[dict[str, Any]] = result.native_launch["instances"]
    terminated = [i for i in instances if i["state"] == "terminated"]
    live = [i for i in instances if i["state"] == "running"]
    assert len(terminated) == 4
    interrupted = {(i["instance_type"], i["zone"], i["capacity_type"]) for i in terminated}
    assert live
    assert all((i["instance_type"], i["zone"], i["capacity_type"]) not in interrupted for i in live)
    claims = server.list(NODECLAIMS).items
    assert len(claims) == len(live)
    for node in server.list(NODES).items:
        assert node["metadata"]["labels"][wellknown.LABEL_CAPACITY_TYPE] == "spot"
        assert str(node["spec"]["providerID"]).rsplit("/", 1)[-1] in {i["id"] for i in live}


def test_an_interrupt_via_queue_without_a_queue_is_refused_naming_the_field() -> None:
    data = {
        "name": "x",
        "description": "x",
        "infrastructure": {"catalog": {"cpus": [2], "zones": ["a"]}},
        "workloads": [{"name": "web", "replicas": 1, "cpu": "1", "memory": "1Gi"}],
        "timeline": [{"at": "1m", "action": "interrupt", "target": "spot", "via": "queue"}],
    }
    with pytest.raises(ScenarioError, match=r"timeline\[0\]\.via: queue needs infrastructure"):
        parse_scenario(data)
    data["timeline"] = [
        {"at": "1m", "action": "scale", "target": "web", "replicas": 2, "via": "queue"}
    ]
    with pytest.raises(ScenarioError, match="only interrupt takes via"):
        parse_scenario(data)
