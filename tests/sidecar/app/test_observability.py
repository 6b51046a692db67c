"""Metrics, health endpoints, logs and live config reload."""

from __future__ import annotations

import logging

import httpx
import pytest

from peers.clients import call_body, call_headers, http_client, unique
from peers.serving import async_wait_until


async def call(sidecar, server: str, text: str, request_id: int = 1) -> httpx.Response:
    async with http_client() as http:
        return await http.post(
            sidecar.url(server),
            json=call_body(request_id, "echo", {"text": text}),
            headers=call_headers("echo"),
        )


async def test_metrics_count_hits_misses_entries_and_latency(sidecar) -> None:
    text = unique()
    for request_id in (1, 2, 3):
        await call(sidecar, "json", text, request_id)
    samples = sidecar.scrape()

    def value(name: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), 0.0)

    assert value("mcpcache_requests_total", server="json", method="tools/call", outcome="miss") == 1
    assert value("mcpcache_requests_total", server="json", method="tools/call", outcome="hit") == 2
    assert value("mcpcache_cache_entries") == 1
    entry = next(iter(sidecar.sidecar.cache.values()))
    assert value("mcpcache_cache_bytes") == entry.size
    assert value("mcpcache_cache_max_entries") == 1024
    assert value("mcpcache_cache_max_bytes") == 64 << 20
    assert (
        value(
            "mcpcache_upstream_request_duration_seconds_count", server="json", method="tools/call"
        )
        == 1
    )


async def test_no_caller_token_or_argument_appears_in_any_label(sidecar) -> None:
    secret = unique()
    async with http_client() as http:
        headers = call_headers("echo") | {"authorization": f"Bearer {secret}"}
        await http.post(
            sidecar.url("json"), json=call_body(1, "echo", {"text": secret}), headers=headers
        )
        text = (await http.get(f"{sidecar.metrics_url}/metrics")).text
    assert secret not in text
    assert "agent-a" not in text


async def test_evictions_are_counted(make_sidecar, json_upstream) -> None:
    _, app = json_upstream
    sidecar = make_sidecar(
        {
            "cache": {"maxEntries": 2},
            "servers": [{"name": "s", "url": app.base_url + "/mcp", "cache": {"enabled": True}}],
        }
    )
    for n in range(5):
        await call(sidecar, "s", unique(), n)
    assert sidecar.sample("mcpcache_cache_entries") == 2
    assert sidecar.sample("mcpcache_cache_evictions_total", reason="capacity") == 3


async def test_health_and_readiness(sidecar) -> None:
    async with http_client() as http:
        health = await http.get(f"{sidecar.metrics_url}/healthz")
        ready = await http.get(f"{sidecar.metrics_url}/readyz")
    assert health.status_code == 200
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "servers": 3}


async def test_a_scrape_with_an_accept_header_that_is_not_utf8_gets_the_default_format(
    sidecar,
) -> None:
    # HTTP allows such bytes; prometheus-client decodes the header as UTF-8.
    async with http_client() as http:
        odd = await http.get(f"{sidecar.metrics_url}/metrics", headers={"accept": b"\xff"})
        asked = await http.get(
            f"{sidecar.metrics_url}/metrics", headers={"accept": "application/openmetrics-text"}
        )
    assert odd.status_code == 200
    assert odd.headers["content-type"].startswith("text/plain")
    assert "mcpcache_requests_total" in odd.text
    assert asked.headers["content-type"].startswith("application/openmetrics-text")


async def test_each_upstream_call_is_one_log_line_and_a_hit_writes_none(sidecar, caplog) -> None:
    caplog.set_level(logging.INFO, logger="mcpcache")
    text = unique()
    await call(sidecar, "json", text, 1)
    await async_wait_until(lambda: _upstream_lines(caplog), what="the upstream log line")
    await call(sidecar, "json", text, 2)
    await call(sidecar, "json", text, 3)
    lines = _upstream_lines(caplog)
    assert len(lines) == 1
    record = lines[0]
    assert (record.server, record.method, record.status, record.stored) == (
        "json",
        "tools/call",
        200,
        True,
    )
    assert text not in caplog.text


def _upstream_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "upstream call"]


@pytest.mark.slow
async def test_a_changed_config_file_takes_effect_without_restart(
    make_sidecar, json_upstream
) -> None:
    _, app = json_upstream
    first = {"servers": [{"name": "a", "url": app.base_url + "/mcp", "cache": {"enabled": True}}]}
    sidecar = make_sidecar(first)
    text = unique()
    assert (await call(sidecar, "a", text)).headers["cache-status"].endswith("stored")
    second = {
        "servers": [
            {"name": "a", "url": app.base_url + "/mcp", "cache": {"enabled": True, "ttl": "2m"}},
            {"name": "b", "url": app.base_url + "/mcp"},
        ]
    }
    sidecar.write_config(second)
    await async_wait_until(lambda: sidecar.source.current.server("b"), what="the reload")
    assert (await call(sidecar, "b", text)).status_code == 200
    hit = await call(sidecar, "a", text, 2)
    assert hit.headers["cache-status"] == "mcpcache; hit", "a config change never flushes the cache"


@pytest.mark.slow
async def test_an_invalid_config_file_keeps_the_last_good_one(
    make_sidecar, json_upstream, caplog
) -> None:
    _, app = json_upstream
    sidecar = make_sidecar({"servers": [{"name": "a", "url": app.base_url + "/mcp"}]})
    sidecar.config_path.write_text("servers: [{name: a, url: ftp://nowhere}]")
    await async_wait_until(lambda: sidecar.source.last_error, what="the rejection")
    assert "not an http or https URL" in sidecar.source.last_error
    assert (await call(sidecar, "a", unique())).status_code == 200
    assert sidecar.sample("mcpcache_config_reloads_total", result="rejected") == 1
    rejected = [r for r in caplog.records if "rejected" in r.getMessage()]
    assert rejected
    assert "not an http or https URL" in rejected[0].reason
