"""The sidecar as a real process: its stderr is one JSON object a line (one per upstream
call, none for a hit, no token or argument), and it is ready only with both listeners up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from peers.clients import call_body, call_headers, http_client, post, unique
from peers.serving import async_wait_until
from peers.sidecar import RunningSidecar, SidecarProcess, one_server


@pytest.fixture
def sidecar_process(tmp_path: Path, echo_upstream) -> Iterator[SidecarProcess]:
    _, app = echo_upstream
    process = SidecarProcess(tmp_path / "sidecar.yaml", one_server(app.base_url + "/mcp"))
    process.start()
    yield process
    process.stop()


def upstream_calls(process: SidecarProcess) -> list[dict[str, Any]]:
    return [r for r in process.log_lines() if r.get("msg") == "upstream call"]


async def test_each_upstream_call_is_one_json_line_on_stderr_and_a_hit_writes_none(
    sidecar_process: SidecarProcess,
) -> None:
    secret, argument = unique(), unique()
    headers = call_headers("t", authorization=f"Bearer {secret}")
    url = sidecar_process.url("s")
    miss = await post(url, call_body(1, "t", {"q": argument}), headers)
    assert miss.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    await async_wait_until(lambda: len(upstream_calls(sidecar_process)) == 1, what="its line")
    for request_id in (2, 3):
        hit = await post(url, call_body(request_id, "t", {"q": argument}), headers)
        assert hit.headers["cache-status"] == "mcpcache; hit"
    # A second miss after the hits: once its line is written, any line a hit wrote would be too.
    error = {"code": -32000, "message": "no"}
    await post(url, call_body(4, "t", {"q": unique(), "error": error}), headers)
    await async_wait_until(lambda: len(upstream_calls(sidecar_process)) >= 2, what="a 2nd line")

    first, second = upstream_calls(sidecar_process)
    assert {k: first[k] for k in ("level", "server", "method", "status", "stored")} == {
        "level": "info",
        "server": "s",
        "method": "tools/call",
        "status": 200,
        "stored": True,
    }
    assert isinstance(first["duration_ms"], int | float)
    assert first["bytes"] == len(miss.content)
    assert (second["stored"], second["not_stored"]) == (False, "error")
    text = sidecar_process.stderr()
    assert secret not in text
    assert argument not in text
    assert len(text.splitlines()) == len(sidecar_process.log_lines()), "every line is JSON"


@pytest.mark.slow
async def test_a_rejected_reload_is_logged_as_json_with_its_reason(
    sidecar_process: SidecarProcess,
) -> None:
    sidecar_process.config_path.write_text("servers: [{name: a, url: ftp://nowhere}]")

    def rejection() -> list[dict[str, Any]]:
        return [r for r in sidecar_process.log_lines() if r["level"] == "error"]

    (record,) = await async_wait_until(rejection, what="the rejection's log line")
    assert record["msg"] == "configuration rejected; keeping the last good one"
    assert "not an http or https URL" in record["reason"]
    assert sidecar_process.sample("mcpcache_config_reloads_total", result="rejected") == 1


async def test_readyz_answers_503_until_both_listeners_are_up(tmp_path: Path) -> None:
    sidecar = RunningSidecar(tmp_path / "sidecar.yaml", one_server("http://127.0.0.1:9/mcp"))
    transport = httpx.ASGITransport(app=sidecar.sidecar.metrics_app())
    async with http_client(transport=transport, base_url="http://sidecar") as http:
        before = await http.get("/readyz")
        assert (before.status_code, before.json()) == (503, {"status": "starting"})
        assert (await http.get("/healthz")).status_code == 200, "alive all the same"
    sidecar.start()
    try:
        async with http_client(timeout=10) as http:
            ready = await http.get(f"{sidecar.metrics_url}/readyz")
            assert (ready.status_code, ready.json()) == (200, {"status": "ready", "servers": 1})
            answer = await post(sidecar.url("nope"), call_body(1, "t", {}), call_headers("t"))
            assert answer.status_code == 404, "the proxy listener is up too"
    finally:
        sidecar.stop()
    assert sidecar.sidecar.ready is False, "not ready once stopped"
