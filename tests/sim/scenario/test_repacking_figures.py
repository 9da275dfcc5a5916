"""A run says what the re-packing stage decided over its rounds (issue 25, item 7).

The small on-demand catalog's scale-up (``test_small_catalog_optimum``): greedy would buy two
16-CPU nodes, the stage re-packs, and the run's JSON and summary say so and how much it saved.
"""

from __future__ import annotations

from karpenter_capi.sim.scenario import runner
from tests.sim.scenario.test_small_catalog_optimum import _all_opted_in


def test_the_run_reports_the_re_packing_outcome_of_its_rounds() -> None:
    result = runner.run(_all_opted_in(), until=60, sample_every=60)
    figures = result.to_json()["repacking"]
    assert figures["rounds"] >= 1
    assert figures["by_outcome"].get("re-packed", 0) >= 1
    assert figures["saved_per_hour"] > 0
    summary = result.summary()
    line = next(s for s in summary.splitlines() if s.startswith("re-packing: "))
    assert "re-packed" in line
    assert "against greedy's plans" in line
    assert "  last: " in summary
