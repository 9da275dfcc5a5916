"""The HTML report of a simulated run: what happened over time, on one self-contained page.

A summary line is enough to tell whether a run went well; understanding *why* it cost what it
did needs the curves: pending pods draining as nodes arrive, NodeClaims running ahead of Nodes,
cost rising and (once consolidation lands) falling. The page embeds plotly.js, so it opens
offline, attached to an issue or a CI artifact.
"""

from __future__ import annotations

import html
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from karpenter_capi.sim.scenario.runner import ScenarioResult


def _figure(result: ScenarioResult) -> go.Figure:
    minutes = [sample.at / 60 for sample in result.samples]
    figure = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=("Pods", "Nodes and NodeClaims", "Cost per hour (USD)"),
    )
    series = (
        (1, "pending pods", [s.pods_pending for s in result.samples]),
        (1, "bound pods", [s.pods_bound for s in result.samples]),
        (2, "nodes", [s.nodes for s in result.samples]),
        (2, "NodeClaims", [s.nodeclaims for s in result.samples]),
        (3, "cost per hour", [s.cost_per_hour for s in result.samples]),
    )
    for row, name, values in series:
        figure.add_trace(
            go.Scatter(x=minutes, y=values, name=name, mode="lines+markers", line_shape="hv"),
            row=row,
            col=1,
        )
    figure.update_xaxes(title_text="virtual minutes", row=3, col=1)
    figure.update_layout(height=900, title_text=f"Scenario {result.scenario}", hovermode="x")
    return figure


def _summary(result: ScenarioResult) -> str:
    bound = result.pod_bound_seconds
    rows = (
        (
            "pods bound / pending / total",
            f"{result.pods_bound} / {result.pods_pending} / {result.pods_total}",
        ),
        ("nodes, NodeClaims", f"{result.nodes}, {result.nodeclaims}"),
        (
            "cost per hour now, at peak",
            f"${result.cost_per_hour:.4f}, ${result.cost_per_hour_peak:.4f}",
        ),
        ("pod creation to bound", ", ".join(f"{k} {v:g} s" for k, v in bound.items())),
        ("virtual / wall time", f"{result.virtual_seconds:g} s / {result.wall_seconds:.1f} s"),
        ("errors", str(len(result.errors))),
    )
    cells = "".join(
        f"<tr><th>{html.escape(name)}</th><td>{html.escape(value)}</td></tr>"
        for name, value in rows
    )
    errors = "".join(f"<li>{html.escape(e)}</li>" for e in result.errors[:50])
    return f'<table class="summary">{cells}</table>' + (f"<ul>{errors}</ul>" if errors else "")


def render_html(result: ScenarioResult) -> str:
    """The whole page (plotly.js inlined: no network needed to view it)."""
    plots = _figure(result).to_html(full_html=False, include_plotlyjs=True, div_id="timeline")
    title = html.escape(f"karpenter-capi simulation: {result.scenario}")
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        "<style>body{font-family:sans-serif;margin:2em}"
        "table.summary th{text-align:left;padding-right:2em}</style></head>"
        f"<body><h1>{title}</h1>{_summary(result)}{plots}</body></html>\n"
    )


def write_html_report(result: ScenarioResult, path: Path) -> Path:
    path.write_text(render_html(result), encoding="utf-8")
    return path
