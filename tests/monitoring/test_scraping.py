"""The sidecar's and the operator's metrics as a real Prometheus scrapes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from peers.clients import http_get
from peers.operator import OperatorProcess
from peers.prometheus import OPERATOR_JOB, SIDECAR_JOB, PrometheusServer, Traffic, promtool
from peers.sidecar import RunningSidecar

JOB = f'job="{SIDECAR_JOB}"'


def by_label(prometheus: PrometheusServer, expr: str, label: str) -> dict[str, float]:
    return {
        sample["metric"].get(label, ""): float(sample["value"][1])
        for sample in prometheus.query(expr)
    }


def test_requests_by_outcome_are_what_the_traffic_was(
    prometheus: PrometheusServer, traffic: Traffic
) -> None:
    counts = prometheus.values(
        f'sum by (server, outcome) (mcpcache_requests_total{{{JOB}, method="tools/call"}})'
    )
    outcomes = (
        ("hit", traffic.hits),
        ("miss", traffic.misses),
        ("collapsed", traffic.collapsed),
        ("stale", traffic.stale),
    )
    expected = {
        (("outcome", outcome), ("server", server)): float(n)
        for outcome, per_server in outcomes
        for server, n in per_server.items()
    }
    assert {key: value for key, value in counts.items() if value} == expected


def test_hit_ratio_per_server_comes_out_of_the_counters(
    prometheus: PrometheusServer, traffic: Traffic
) -> None:
    ratio = by_label(
        prometheus,
        f'sum by (server) (mcpcache_requests_total{{{JOB}, outcome="hit"}})'
        f' / sum by (server) (mcpcache_requests_total{{{JOB}, outcome=~"hit|miss"}})',
        "server",
    )
    for server, hits in traffic.hits.items():
        assert ratio[server] == pytest.approx(hits / (hits + traffic.misses[server]))
    # A server that never had a hit has no hit series, so PromQL gives it no ratio.
    assert set(ratio) == set(traffic.hits)


def test_not_stored_and_upstream_errors_are_counted_by_reason(
    prometheus: PrometheusServer, traffic: Traffic
) -> None:
    not_stored = by_label(prometheus, f"mcpcache_not_stored_total{{{JOB}}}", "reason")
    assert not_stored["tool_error"] == traffic.not_stored_tool_error
    errors = by_label(prometheus, f'mcpcache_upstream_errors_total{{{JOB}, server="down"}}', "kind")
    assert errors == {"unreachable": traffic.unreachable}


def test_cache_gauges_show_the_stored_entries_and_their_bytes(
    prometheus: PrometheusServer, monitored_sidecar: RunningSidecar, traffic: Traffic
) -> None:
    # Live entries apart from expired ones: the `stale` server's entry lives 10 ms, so by
    # the scrape it is held (for stale answers) but no longer live.
    entries = prometheus.values(f"mcpcache_cache_entries{{{JOB}}}")
    assert list(entries.values()) == [traffic.stored - 1]
    expired = prometheus.values(f"mcpcache_cache_expired_entries{{{JOB}}}")
    assert list(expired.values()) == [1]
    # The gauge is set at scrape time; nothing is stored or expires after the traffic.
    stored_bytes = list(prometheus.values(f"mcpcache_cache_bytes{{{JOB}}}").values())
    assert stored_bytes == [monitored_sidecar.sample("mcpcache_cache_bytes")]
    assert stored_bytes[0] > 0
    budget = list(prometheus.values(f"mcpcache_cache_max_bytes{{{JOB}}}").values())
    assert budget == [64 * 1024 * 1024]


def test_upstream_latency_quantiles_follow_the_slow_server(
    prometheus: PrometheusServer, traffic: Traffic
) -> None:
    def quantile(q: float) -> dict[str, float]:
        return by_label(
            prometheus,
            f"histogram_quantile({q}, sum by (server, le) "
            f'(mcpcache_upstream_request_duration_seconds_bucket{{{JOB}, method="tools/call"}}))',
            "server",
        )

    p50, p99 = quantile(0.5), quantile(0.99)
    # Four of the six forwarded calls to `timed` waited slow_seconds, inside the
    # (0.25, 0.5] bucket; the other two (tool errors) came back at once.
    assert 0.25 < p50["timed"] <= 0.5
    assert traffic.slow_seconds <= p99["timed"] <= 0.5
    assert p99["fast"] < 0.25, "the echo server answers in far less than the timed one"
    counts = by_label(
        prometheus,
        "sum by (server) (mcpcache_upstream_request_duration_seconds_count"
        f'{{{JOB}, method="tools/call"}})',
        "server",
    )
    assert counts["timed"] == traffic.misses["timed"]


def check_metrics(prometheus_bin: Path, url: str) -> None:
    """`promtool check metrics` on what `url` serves: names, types, units and help
    follow Prometheus's conventions."""
    exposition = http_get(url, timeout=10).text
    result = promtool(prometheus_bin, "check", "metrics", stdin=exposition)
    assert result.returncode == 0, result.stdout + result.stderr


def test_sidecar_exposition_passes_promtool_check_metrics(
    prometheus_bin: Path, monitored_sidecar: RunningSidecar, traffic: Traffic
) -> None:
    check_metrics(prometheus_bin, f"{monitored_sidecar.metrics_url}/metrics")


def test_operator_is_scraped_and_passes_promtool_check_metrics(
    prometheus_bin: Path, monitored_operator: OperatorProcess, prometheus: PrometheusServer
) -> None:
    check_metrics(prometheus_bin, f"http://127.0.0.1:{monitored_operator.metrics_port}/metrics")
    results = by_label(
        prometheus, f'mcpcache_operator_admissions_total{{job="{OPERATOR_JOB}"}}', "result"
    )
    assert {"injected", "refused"} <= set(results), "what the alerts and dashboard read"
