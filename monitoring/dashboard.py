"""The mcpcache Grafana dashboard, generated with grafana-foundation-sdk.

The JSON the chart ships (charts/mcpcache/files/mcpcache-dashboard.json) is this module's
output; a test regenerates it and compares, and runs every query against a real Prometheus
scraping a sidecar and the operator. After changing a panel:

    python monitoring/dashboard.py

A panel is one entry of `PANELS`: a title, a unit, and its queries with their legends.
Queries filter on the `$namespace` and `$server` variables; `$__rate_interval` is
Grafana's.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.builders import dashboard as dashboard_builder
from grafana_foundation_sdk.builders import prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

OUTPUT = Path(__file__).resolve().parents[1] / "charts/mcpcache/files/mcpcache-dashboard.json"
UID = "mcpcache"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")

SIDECAR = 'namespace=~"$namespace"'
SERVER = f'{SIDECAR}, server=~"$server"'


def rate(metric: str, selector: str = SERVER, by: str = "") -> str:
    """`sum by (…) (rate(metric{selector}[$__rate_interval]))`."""
    grouping = f" by ({by})" if by else ""
    series = f"{metric}{{{selector}}}" if selector else metric
    return f"sum{grouping} (rate({series}[$__rate_interval]))"


def ratio(numerator: str, denominator: str) -> str:
    return f"{numerator}\n/\n{denominator}"


def quantile(q: float, metric: str, by: str) -> str:
    return f"histogram_quantile({q}, {rate(metric + '_bucket', by=by + ', le')})"


HIT_RATIO = ratio(
    rate("mcpcache_requests_total", f'outcome="hit", {SERVER}', by="namespace, server"),
    rate("mcpcache_requests_total", f'outcome=~"hit|miss", {SERVER}', by="namespace, server"),
)
"""Hits over hits and misses: bypassed calls are never looked up, so they do not count."""

LATENCY = "mcpcache_upstream_request_duration_seconds"


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: tuple[tuple[str, str], ...]
    """(PromQL, legend) pairs."""
    description: str = ""
    stacked: bool = False


def panel(title: str, unit: str, *queries: tuple[str, str], **options: Any) -> Panel:
    return Panel(title, unit, queries, **options)


OPERATOR_QUANTILE = (
    "histogram_quantile({q}, sum by (le) "
    "(rate(mcpcache_operator_{metric}_bucket[$__rate_interval])))"
)


def gauge(metric: str) -> str:
    return f"sum by (namespace) ({metric}{{{SIDECAR}}})"


PANELS: tuple[Panel, ...] = (
    panel(
        "Hit ratio per server",
        "percentunit",
        (HIT_RATIO, "{{server}} {{namespace}}"),
        description="Hits over hits and misses, across the sidecars of a namespace.",
    ),
    panel(
        "Upstream calls and time saved",
        "short",
        (
            rate("mcpcache_upstream_calls_saved_total", by="namespace, server"),
            "calls/s {{server}} {{namespace}}",
        ),
        (
            rate("mcpcache_upstream_seconds_saved_total", by="namespace, server"),
            "upstream s/s {{server}} {{namespace}}",
        ),
        description="Upstream calls the cache answered in place of (hits, and calls that "
        "waited for an identical one), and the upstream time those calls took when they "
        "were made: seconds of upstream work saved per second.",
    ),
    panel(
        "Requests by outcome",
        "reqps",
        (rate("mcpcache_requests_total", by="outcome"), "{{outcome}}"),
        stacked=True,
    ),
    panel(
        "Not stored, by reason",
        "ops",
        (rate("mcpcache_not_stored_total", by="server, reason"), "{{server}}: {{reason}}"),
        description="Forwarded answers to cacheable calls that were not stored, by reason.",
    ),
    panel(
        "Upstream latency p50 / p99",
        "s",
        (quantile(0.5, LATENCY, "namespace, server"), "p50 {{server}}"),
        (quantile(0.99, LATENCY, "namespace, server"), "p99 {{server}}"),
    ),
    panel(
        "Upstream errors by kind",
        "ops",
        (rate("mcpcache_upstream_errors_total", by="server, kind"), "{{server}}: {{kind}}"),
    ),
    panel(
        "Cache entries against the budget",
        "short",
        (gauge("mcpcache_cache_entries"), "entries {{namespace}}"),
        (gauge("mcpcache_cache_max_entries"), "budget {{namespace}}"),
        description="Summed over the sidecars of a namespace.",
    ),
    panel(
        "Cache bytes against the budget",
        "bytes",
        (gauge("mcpcache_cache_bytes"), "bytes {{namespace}}"),
        (gauge("mcpcache_cache_max_bytes"), "budget {{namespace}}"),
        description="Summed over the sidecars of a namespace.",
    ),
    panel(
        "Evictions by reason",
        "ops",
        (rate("mcpcache_cache_evictions_total", SIDECAR, by="reason"), "{{reason}}"),
        description="capacity: evicted for space before expiring (is the budget too small?).",
    ),
    panel(
        "Collapsed and stale answers",
        "reqps",
        (
            rate(
                "mcpcache_requests_total",
                f'outcome=~"collapsed|stale", {SERVER}',
                by="server, outcome",
            ),
            "{{server}}: {{outcome}}",
        ),
        description="collapsed: answered by an identical call's upstream call; stale: "
        "answered from an expired entry (staleIfError, staleWhileRevalidate).",
    ),
    panel(
        "Shared tier: lookups and stores",
        "ops",
        (rate("mcpcache_shared_lookups_total", SIDECAR, by="result"), "lookup {{result}}"),
        (rate("mcpcache_shared_stores_total", SIDECAR, by="result"), "store {{result}}"),
        description="Only sidecars with a shared tier (Redis). skipped: the breaker is open.",
    ),
    panel(
        "Shared tier: errors",
        "ops",
        (rate("mcpcache_shared_errors_total", SIDECAR, by="op, kind"), "{{op}}: {{kind}}"),
        description="timeout: Redis slower than the timeout; connection: unreachable; "
        "response: Redis refused (credentials, ACL).",
    ),
    panel(
        "Shared tier: breaker",
        "short",
        (
            f"sum by (mcpcache_shared_breaker) (mcpcache_shared_breaker{{{SIDECAR}}})",
            "{{mcpcache_shared_breaker}}",
        ),
        description="Sidecars whose breaker is in each state; open: Redis is skipped.",
        stacked=True,
    ),
    panel(
        "Configuration reloads",
        "ops",
        (rate("mcpcache_config_reloads_total", SIDECAR, by="result"), "{{result}}"),
    ),
    panel(
        "Operator reconciliations",
        "ops",
        (rate("mcpcache_operator_reconciles_total", by="result", selector=""), "{{result}}"),
    ),
    panel(
        "Operator leader",
        "short",
        ("sum(mcpcache_operator_leader)", "replicas leading"),
        ("count(mcpcache_operator_leader)", "replicas"),
        description="Exactly one replica should lead (hold the Lease and reconcile).",
    ),
    panel(
        "Operator queue",
        "short",
        ("sum(mcpcache_operator_reconcile_pending)", "namespaces pending"),
        description="Namespaces waiting for a pass or in one; 0 when all is reconciled.",
    ),
    panel(
        "Operator queue wait and pass duration",
        "s",
        (OPERATOR_QUANTILE.format(q=0.99, metric="reconcile_queue_seconds"), "wait p99"),
        (OPERATOR_QUANTILE.format(q=0.99, metric="reconcile_duration_seconds"), "pass p99"),
        description="wait: from a namespace's first change to its pass; pass: its work.",
    ),
    panel(
        "Webhook admissions",
        "ops",
        (rate("mcpcache_operator_admissions_total", by="result", selector=""), "{{result}}"),
        stacked=True,
    ),
)


def _timeseries(number: int, spec: Panel) -> timeseries.Panel:
    built = (
        timeseries.Panel()
        .id(number)
        .title(spec.title)
        .unit(spec.unit)
        .datasource(DATASOURCE)
        .height(8)
        .span(12)
        .line_width(1)
        .fill_opacity(10 if not spec.stacked else 60)
        .legend(
            common_builder.VizLegendOptions()
            .show_legend(True)
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
        )
    )
    if spec.description:
        built = built.description(spec.description)
    if spec.stacked:
        built = built.stacking(common_builder.StackingConfig().mode(common.StackingMode.NORMAL))
    for index, (expr, legend) in enumerate(spec.queries):
        built = built.with_target(
            prometheus.Dataquery()
            .expr(expr)
            .legend_format(legend)
            .ref_id(chr(ord("A") + index))
            .datasource(DATASOURCE)
        )
    return built


def _label_variable(name: str, series: str) -> dashboard_builder.QueryVariable:
    """A multi-value variable listing the values of label `name` on `series`."""
    every = VariableOption(selected=True, text="All", value="$__all")
    return (
        dashboard_builder.QueryVariable(name)
        .label(name)
        .datasource(DATASOURCE)
        .query(f"label_values({series}, {name})")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(every)
    )


def build() -> dict[str, Any]:
    """The dashboard as the JSON object Grafana imports."""
    board = (
        dashboard_builder.Dashboard("mcpcache")
        .uid(UID)
        .description("Cache effectiveness, capacity and upstream health of mcpcache sidecars.")
        .tags(["mcpcache", "mcp"])
        .editable()
        .time("now-1h", "now")
        .refresh("30s")
        .with_variable(
            dashboard_builder.DatasourceVariable("datasource")
            .label("Data source")
            .type("prometheus")
        )
        .with_variable(_label_variable("namespace", "mcpcache_requests_total"))
        .with_variable(
            _label_variable("server", 'mcpcache_requests_total{namespace=~"$namespace"}')
        )
    )
    for number, spec in enumerate(PANELS, start=1):
        board = board.with_panel(_timeseries(number, spec))
    document: dict[str, Any] = json.loads(JSONEncoder().encode(board.build()))
    return document


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    args.output.write_text(render())


if __name__ == "__main__":
    main()
