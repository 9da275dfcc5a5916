"""The shipped ``spot-interruption`` scenario: replaced before the deadline, no pod stranded."""

from __future__ import annotations

from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import load_scenario


def test_the_replacement_is_ready_before_the_deadline_and_no_pod_waits() -> None:
    result = run(load_scenario("spot-interruption"), until=300)
    figures = result.spot_interruption
    assert figures["nodes_interrupted"] >= 1
    assert figures["nodes_gone_before_deadline"] == figures["nodes_interrupted"]
    assert figures["replacement_ready_before_deadline"] is True
    assert figures["replacement_ready_after_notice_seconds"] < 120
    assert figures["pods_moved"] == 12
    assert figures["pods_without_place"] == 0, figures
    assert figures["pods_waited_max_seconds"] < figures["replacement_boot_seconds"]
    assert result.pods_bound == 12
    assert result.errors == []
    # Planned onto the replacement while their interrupted node still runs them: moved, not
    # stranded (the plan follower counted all 12 as stranded before it knew interruptions).
    assert result.beyond_plan.pods_stranded == 0
    assert result.beyond_plan.nodeclaims_beyond_plan == 0
    # The interrupted offering is not bought again for the replacement.
    assert result.disruptions == {} or "spot_interrupted" not in result.disruptions
    summary = result.summary()
    assert "pods with no place to go longer than the boot  0 of 12 moved" in summary
