"""The HTML report of a simulated run: what happened over time, on one self-contained page.

A summary line is enough to tell whether a run went well; understanding *why* it cost what it
did needs the curves: pending pods draining as nodes arrive, NodeClaims running ahead of Nodes,
which instance types the nodes are (stacked, so a consolidation that swaps big nodes for small
ones shows even when the total stays flat), cost rising and (once consolidation lands) falling,
NodeClaims disrupted and why. The page embeds plotly.js, so it opens offline, attached to an
issue or a CI artifact. The tables below the title are the terminal summary's
(``sim.scenario.summary``), as HTML.
"""

from __future__ import annotations

import html
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from karpenter_capi.sim.scenario.result import ScenarioResult


def _figure(result: ScenarioResult) -> go.Figure:
    minutes = [sample.at / 60 for sample in result.samples]
    figure = make_subplots(
        rows=5,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.05,
        subplot_titles=(
            "Pods",
            "Nodes and NodeClaims",
            "Nodes by instance type",
            "Cost per hour (USD)",
            "NodeClaims disrupted so far, by reason",
        ),
    )
    series = [
        (1, "pending pods", [s.pods_pending for s in result.samples]),
        (1, "bound pods", [s.pods_bound for s in result.samples]),
        (2, "nodes", [s.nodes for s in result.samples]),
        (2, "NodeClaims", [s.nodeclaims for s in result.samples]),
        (4, "cost per hour", [s.cost_per_hour for s in result.samples]),
    ]
    reasons = sorted({reason for s in result.samples for reason in s.disruptions})
    series.extend(
        (5, f"disrupted: {reason}", [s.disruptions.get(reason, 0) for s in result.samples])
        for reason in reasons
    )
    if not reasons:  # an empty plot would look broken; a flat line says "none"
        series.append((5, "disrupted", [0 for _ in result.samples]))
    for row, name, values in series:
        figure.add_trace(
            go.Scatter(x=minutes, y=values, name=name, mode="lines+markers", line_shape="hv"),
            row=row,
            col=1,
        )
    types = sorted({t for s in result.samples for t in s.nodes_by_instance_type})
    for instance_type in types:
        figure.add_trace(
            go.Scatter(
                x=minutes,
                y=[s.nodes_by_instance_type.get(instance_type, 0) for s in result.samples],
                name=f"nodes: {instance_type}",
                mode="lines",
                line_shape="hv",
                stackgroup="nodes-by-type",
            ),
            row=3,
            col=1,
        )
    figure.update_xaxes(title_text="virtual minutes", row=5, col=1)
    figure.update_layout(height=1400, title_text=f"Scenario {result.scenario}", hovermode="x")
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
        ("disruptions by reason", _counts(result.disruptions)),
        ("API requests by verb", _counts(result.api_requests)),
        ("watch polls (stepped informers, not counted above)", f"{result.watch_polls:,}"),
        ("virtual / wall time", f"{result.virtual_seconds:g} s / {result.wall_seconds:.1f} s"),
        ("errors", str(len(result.errors))),
    )
    cells = "".join(
        f"<tr><th>{html.escape(name)}</th><td>{html.escape(value)}</td></tr>"
        for name, value in rows
    )
    errors = "".join(f"<li>{html.escape(e)}</li>" for e in result.errors[:50])
    return (
        f'<table class="summary">{cells}</table>'
        + _capacity(result)
        + (f"<ul>{errors}</ul>" if errors else "")
    )


def _counts(counts: dict[str, int]) -> str:
    if not counts:
        return "none"
    return ", ".join(f"{name} {count:,}" for name, count in sorted(counts.items()))


def _capacity(result: ScenarioResult) -> str:
    """Nodes by instance type and capacity type at the end, as the terminal summary has them."""
    if not result.capacity:
        return ""
    header = "".join(
        f"<th>{name}</th>"
        for name in ("instance type", "capacity", "nodes", "price/h each", "cost/h")
    )
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(cell)}</td>"
            for cell in (
                row.instance_type,
                row.capacity_type,
                str(row.count),
                f"${row.price_per_hour:.4f}",
                f"${row.cost_per_hour:.4f}",
            )
        )
        + "</tr>"
        for row in result.capacity
    )
    return f'<h2>Nodes at the end</h2><table class="capacity"><tr>{header}</tr>{rows}</table>'


def render_html(result: ScenarioResult) -> str:
    """The whole page (plotly.js inlined: no network needed to view it)."""
    plots = _figure(result).to_html(full_html=False, include_plotlyjs=True, div_id="timeline")
    title = html.escape(f"karpenter-capi simulation: {result.scenario}")
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        "<style>body{font-family:sans-serif;margin:2em}"
        "table.summary th{text-align:left;padding-right:2em}"
        "table.capacity td,table.capacity th{padding:0 1em 0 0;text-align:left}</style></head>"
        f"<body><h1>{title}</h1>{_summary(result)}{plots}</body></html>\n"
    )


def write_html_report(result: ScenarioResult, path: Path) -> Path:
    path.write_text(render_html(result), encoding="utf-8")
    return path
