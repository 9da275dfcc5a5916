"""``benchmarks/fleet.py``'s ratios: the decision p99 and the controller's share of it, the
fleet's over the lone cluster's, the storm's change from the fleet's and the storm's over the
control's, per run."""

from __future__ import annotations

from typing import Any

from benchmarks import fleet


def _phase(p99_ms: float, share_p99_ms: float) -> dict[str, Any]:
    return {"latency": {"p99_ms": p99_ms, "last_mark_to_claim_p99_ms": share_p99_ms}}


def test_a_run_reports_both_ratios_end_to_end_and_for_the_controllers_share() -> None:
    result = {
        "lone": _phase(1000.0, 800.0),
        "fleet": _phase(3000.0, 1200.0),
        "control": _phase(3300.0, 1200.0),
        "storm": _phase(3300.0, 1140.0),
    }
    fleet._ratios(result)
    assert {key: result[key] for key in fleet.RATIOS} == {
        "fleet_p99_over_lone": 3.0,
        "storm_p99_change": 0.1,
        "fleet_share_p99_over_lone": 1.5,
        "storm_share_p99_change": -0.05,
        # The 429s' own effect: against the same shape with the extra cluster answering.
        "storm_p99_over_control": 1.0,
        "storm_share_p99_over_control": 0.95,
    }


def test_a_phase_left_out_leaves_its_ratios_out() -> None:
    result = {"fleet": _phase(3000.0, 1200.0), "storm": _phase(3000.0, 1200.0)}
    fleet._ratios(result)
    assert [key for key in fleet.RATIOS if key in result] == [
        "storm_p99_change",
        "storm_share_p99_change",
    ]
