"""The HTML report of a scenario run: one self-contained page with the run's curves."""

from __future__ import annotations

import json
import re
from pathlib import Path

from karpenter_capi.cli import main
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import load_scenario


def test_the_report_embeds_plotly_and_the_runs_series(tmp_path: Path) -> None:
    result = run(load_scenario("scale-from-zero"), until=300)
    report = tmp_path / "run.html"
    assert main(["simulate", "scale-from-zero", "--until", "5m", "--report", str(report)]) == 0
    page = report.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    # Self-contained: plotly.js is inlined, nothing is fetched from the network.
    assert "plotly.js" in page.lower() or "Plotly.newPlot" in page
    assert not re.search(r'<script[^>]+src="https?://', page)
    assert "Plotly.newPlot" in page
    for name in ("pending pods", "bound pods", "nodes", "NodeClaims", "cost per hour"):
        assert json.dumps(name) in page
    assert f"{result.pods_bound} / {result.pods_pending} / {result.pods_total}" in page
