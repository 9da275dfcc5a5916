"""A round of NodeClaims on one MachineDeployment: one replica write, and no NodeClaim of the
round gets its provider ID later than its Machine did (the scenario's launch-round figures)."""

from __future__ import annotations

from typing import Any

from karpenter_capi.sim.capi import ANNOTATION_PROVISION_DELAY
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import Scenario


def _burst(replicas: int, provision_delay: str) -> Scenario:
    one_deployment: dict[str, Any] = {"cpus": [4], "families": {"c": 2}, "zones": ["zone-a"]}
    return Scenario.model_validate(
        {
            "name": "burst",
            "description": "pods that each need a node of the only MachineDeployment",
            "infrastructure": {"catalog": one_deployment},
            "workloads": [{"name": "burst", "replicas": replicas, "cpu": "3", "memory": "1Gi"}],
            "timeline": [
                {
                    "at": 0,
                    "action": "patch",
                    "kind": "MachineDeployment",
                    "target": "*",
                    "patch": {
                        "metadata": {"annotations": {ANNOTATION_PROVISION_DELAY: provision_delay}}
                    },
                }
            ],
        }
    )


def test_ten_nodeclaims_on_one_machine_deployment_cost_one_replica_write_and_no_poll() -> None:
    # 7 s is no multiple of the 5 s launch poll: a NodeClaim that learnt its provider ID at a
    # poll would get it up to 5 s after its Machine did.
    result = run(_burst(10, "7s"), until=60)

    figures = result.to_json()["launch_rounds"]
    assert result.pods_bound == 10
    assert result.nodeclaims == 10
    assert figures["rounds"] == 1
    assert figures["replica_writes_per_resource"] == {"mean": 1.0, "max": 1.0}
    # All Machines were made at the round's start (1.5 s in: the batching window) and
    # provisioned 7 s after their creationTimestamp, which has whole seconds: at 8 s. Every
    # NodeClaim had its provider ID then, the last as early as the first; polling, the first
    # poll after 8 s would have come at 11.5 s.
    assert figures["last_provider_id_seconds"] == {"p50": 6.5, "max": 6.5}
    assert figures["provider_id_spread_seconds"] == {"max": 0.0}
    summary = result.summary()
    assert "launch rounds: 1" in summary
    assert "replica writes per resource and round  mean 1   max 1" in summary
    assert "round start to its last provider ID    p50 6.5 s   max 6.5 s" in summary
