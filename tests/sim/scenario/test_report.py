"""The HTML report of a scenario run: one self-contained page with the run's curves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

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
    # Disruptions over time get their own plot (a flat "disrupted" line when there were none).
    assert "NodeClaims disrupted so far, by reason" in page
    names = [f"disrupted: {reason}" for reason in result.disruptions] or ["disrupted"]
    for name in names:
        assert json.dumps(name) in page
    assert "API requests by verb" in page
    # Nodes by instance type over time: one stacked trace per type a sample saw.
    assert "Nodes by instance type" in page
    types = {t for sample in result.samples for t in sample.nodes_by_instance_type}
    assert types
    for instance_type in types:
        assert json.dumps(f"nodes: {instance_type}") in page
    assert page.count('"stackgroup":"nodes-by-type"') == len(types)
    for row in result.capacity:
        assert f"<td>{row.instance_type}</td>" in page


def test_the_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    report = tmp_path / "run.html"
    assert main(["simulate", "scale-from-zero", "--until", "3m", "--report", str(report)]) == 0
    screenshot = tmp_path / "run.png"
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1200,1100",
            "--virtual-time-budget=5000",
            f"--screenshot={screenshot}",
            report.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    png = screenshot.read_bytes()
    assert png.startswith(b"\x89PNG")
    # Blank pages compress to a few kB; three drawn plots with axes and legends do not.
    assert len(png) > 30_000
