"""The Grafana dashboard queries only series the controller exposes, with labels they carry.

A dashboard panel on a misspelt metric or label shows "No data" and nobody notices; this test
reads every PromQL expression of deploy/dashboards/karpenter-capi.json (panels and template
variables) and checks each metric name against the collectors the code registers (the core's
``Metrics`` and the cloud plugins' price age gauge), as they are exposed (``_total`` counters,
``_bucket``/``_sum``/``_count`` histograms, quantiles of summaries), and each label it filters
or groups by against that metric's label names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from karpenter_capi.core.observability.metrics import Metrics
from karpenter_capi.plugins._cloud.metrics import CloudMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "dashboards" / "karpenter-capi.json"
METRIC = re.compile(r"\b((?:karpenter|controller_runtime|workqueue)_[a-z0-9_]+)\b(\{[^}]*\})?")
MATCHER_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
LABEL_VALUES = re.compile(r"label_values\(\s*([a-z0-9_]+)\s*,\s*([a-z_]+)\s*\)")


def exposed_series() -> dict[str, set[str]]:
    """Every sample name a scrape of /metrics can show, with the labels it carries."""
    metrics = Metrics()
    CloudMetrics(metrics, "capa")  # registers the price age gauge, as capa and capz do
    series: dict[str, set[str]] = {}
    collectors = set(metrics.registry._names_to_collectors.values())
    for collector in collectors:
        labels = set(getattr(collector, "_labelnames", ()))
        for family in collector.describe():
            name, kind = family.name, family.type
            if kind == "counter":
                series[name + "_total"] = labels
            elif kind == "gauge":
                series[name] = labels
            elif kind == "histogram":
                series[name + "_bucket"] = labels | {"le"}
                series[name + "_sum"] = series[name + "_count"] = labels
            elif kind == "summary":
                series[name] = labels | {"quantile"}
                series[name + "_sum"] = series[name + "_count"] = labels
    return series


def expressions(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and query variable."""

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for item in items:
            yield item
            yield from panels(item.get("panels", []))

    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield f"${variable['name']}", variable["query"]["query"]


def test_the_dashboard_queries_only_exposed_metrics_and_labels() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    series = exposed_series()
    queried: set[str] = set()
    for where, expr in expressions(dashboard):
        found = METRIC.findall(expr)
        assert found, f"{where}: {expr!r} queries no karpenter-capi metric"
        labels_in_expr: set[str] = set()
        for name, matchers in found:
            assert name in series, f"{where}: {name} is not a series the controller exposes"
            queried.add(name)
            labels_in_expr |= series[name]
            for label in MATCHER_LABEL.findall(matchers):
                assert label in series[name], f"{where}: {name} has no label {label!r}"
        for grouping in GROUPING.findall(expr):
            for label in (x.strip() for x in grouping.split(",")):
                assert label in labels_in_expr, f"{where}: no queried metric has label {label!r}"
        for name, label in LABEL_VALUES.findall(expr):
            assert label in series[name], f"{where}: {name} has no label {label!r}"
    # Enough of the picture to be worth importing: provisioning, disruption, termination,
    # cloud provider and controller health.
    for needed in (
        "karpenter_nodeclaims_created_total",
        "karpenter_pods_startup_duration_seconds",
        "karpenter_voluntary_disruption_decisions_total",
        "karpenter_nodes_eviction_requests_total",
        "karpenter_cloudprovider_errors_total",
        "controller_runtime_reconcile_errors_total",
    ):
        assert needed in queried


def test_the_dashboard_is_importable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "karpenter-capi"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    # Panels sit on the 24-column grid without overlapping.
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        area = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area
    # Every query names its data source through the variable, so the import asks for one.
    assert dashboard["templating"]["list"][0]["type"] == "datasource"
