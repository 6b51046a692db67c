"""The Grafana dashboard: generated from code, shipped by the chart, and every query
answered by a real Prometheus scraping a sidecar and the operator."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from peers.controlplane import ControlPlane
from peers.operator import OperatorProcess
from peers.paths import CHART, ROOT
from peers.prometheus import PrometheusServer, Traffic

DASHBOARD = CHART / "files" / "mcpcache-dashboard.json"
GENERATOR = ROOT / "monitoring" / "dashboard.py"
# What Grafana puts in place of the dashboard's variables when every value is selected.
VARIABLES = {"$namespace": ".*", "$server": ".*", "$__rate_interval": "2m"}


def committed() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel."""
    return [
        (panel["title"], target["expr"])
        for panel in committed()["panels"]
        for target in panel["targets"]
    ]


def substitute(expr: str) -> str:
    for variable, value in VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def test_committed_dashboard_is_what_the_generator_writes(tmp_path: Path) -> None:
    out = tmp_path / "dashboard.json"
    subprocess.run([sys.executable, str(GENERATOR), "--output", str(out)], check=True, timeout=60)
    assert out.read_text() == DASHBOARD.read_text(), "run python monitoring/dashboard.py"


def test_dashboard_has_the_panels_operators_look_for() -> None:
    titles = {panel["title"] for panel in committed()["panels"]}
    assert {
        "Hit ratio per server",
        "Upstream calls and time saved",
        "Requests by outcome",
        "Not stored, by reason",
        "Cache entries against the budget",
        "Cache bytes against the budget",
        "Evictions by reason",
        "Upstream latency p50 / p99",
        "Collapsed and stale answers",
        "Shared tier: lookups and stores",
        "Shared tier: errors",
        "Shared tier: breaker",
        "Operator leader",
        "Operator queue",
    } <= titles
    assert all(panel["datasource"]["uid"] == "${datasource}" for panel in committed()["panels"])


@pytest.mark.parametrize(("title", "expr"), queries(), ids=[title for title, _ in queries()])
def test_every_panel_query_is_answered_with_data_from_exported_metrics(
    prometheus: PrometheusServer,
    traffic: Traffic,
    monitored_operator: OperatorProcess,
    title: str,
    expr: str,
) -> None:
    query = substitute(expr)
    assert "$" not in query, f"{title}: a variable the test does not know"
    exported = prometheus.metric_names()
    for name in re.findall(r"\bmcpcache_\w+", query):
        assert name in exported, f"{title}: {name} is not exported"
    # A query error raises at once; a query that matches nothing times out.
    prometheus.wait_for(query, timeout=30)


def test_variables_list_the_scraped_values(prometheus: PrometheusServer, traffic: Traffic) -> None:
    for variable in committed()["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"])
        assert match, variable["query"]
        selector = substitute(match.group(1))
        assert prometheus.query(f"count({selector})"), f"{variable['name']}: {selector}"


def test_chart_ships_the_dashboard_for_grafanas_sidecar(control_plane: ControlPlane) -> None:
    rendered = control_plane.run_helm(
        "template",
        "mcpcache",
        str(CHART),
        "--namespace",
        "mcpcache-system",
        "--set",
        "metrics.grafanaDashboard.enabled=true",
        "--set",
        "metrics.grafanaDashboard.namespace=grafana",
        "--show-only",
        "templates/grafana-dashboard.yaml",
    ).stdout
    config_map = yaml.safe_load(rendered)
    assert config_map["metadata"]["namespace"] == "grafana"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["mcpcache.json"]) == committed()
