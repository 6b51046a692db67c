"""A bounded soak: many callers mixing hits, misses, streams and injected errors.

Runs for MCPCACHE_SOAK_SECONDS (8 s by default; longer by hand) against a sidecar
process at DEBUG log level, then checks that nothing but the injected errors failed,
every answer belonged to its caller, the cache stayed within budget, RSS stayed flat,
and no token, argument or result appeared in any log line.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import psutil
import pytest

from peers.clients import call_body, call_headers, http_client, http_get, sse_messages
from peers.serving import free_port, wait_until
from peers.sidecar import parse_samples, sample

SECONDS = float(os.environ.get("MCPCACHE_SOAK_SECONDS", "8"))
TOKENS = [f"secret-token-{uuid.uuid4().hex}" for _ in range(3)]
SECRET_WORD = f"secret-argument-{uuid.uuid4().hex}"


def metric(text: str, name: str) -> float:
    return sample(parse_samples(text), name)


@pytest.mark.slow
def test_soak_mixed_traffic(upstream, tmp_path: Path) -> None:
    _, app = upstream
    listen, metrics_port = free_port(), free_port()
    config = tmp_path / "sidecar.json"
    config.write_text(
        json.dumps(
            {
                "appId": "soak",
                "listen": {"host": "127.0.0.1", "port": listen},
                "metrics": {"host": "127.0.0.1", "port": metrics_port},
                "cache": {"maxEntries": 40, "maxBytes": "256Ki"},
                "servers": [
                    {"name": "up", "url": app.base_url + "/mcp", "cache": {"enabled": True}}
                ],
            }
        )
    )
    log = (tmp_path / "sidecar.log").open("wb")
    command = [sys.executable, "-m", "mcpcache.sidecar.cli", "sidecar", "--config", str(config)]
    process = subprocess.Popen([*command, "--log-level", "DEBUG"], stderr=log)
    url = f"http://127.0.0.1:{listen}/mcp/up"
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        wait_until(lambda: _ok(f"http://127.0.0.1:{metrics_port}/readyz"), 30, "the sidecar")
        stats = asyncio.run(_drive(url, psutil.Process(process.pid), metrics_url))
    finally:
        process.terminate()
        process.wait(15)
        log.close()

    assert stats["unexpected"] == [], stats["unexpected"][:5]
    assert stats["calls"] > 200
    assert stats["injected"] > 0
    assert stats["hits"] > 0
    assert stats["max_entries"] <= 40
    assert stats["max_bytes"] <= 256 * 1024
    assert stats["rss_growth_mib"] < 15, stats
    text = (tmp_path / "sidecar.log").read_text()
    assert "upstream call" in text
    for secret in [*TOKENS, SECRET_WORD]:
        assert secret not in text


def _ok(url: str) -> bool:
    try:
        return http_get(url).status_code == 200
    except httpx.HTTPError:
        return False


async def _drive(url: str, sidecar: psutil.Process, metrics_url: str) -> dict:
    stats: dict = {
        "calls": 0,
        "injected": 0,
        "hits": 0,
        "unexpected": [],
        "max_entries": 0,
        "max_bytes": 0,
    }
    rng = random.Random(7)
    deadline = time.monotonic() + SECONDS
    rss: list[int] = []

    async def caller(http: httpx.AsyncClient, n: int) -> None:
        while time.monotonic() < deadline:
            token = rng.choice(TOKENS)
            request_id = f"{n}-{stats['calls']}"
            kind = rng.choices(["hit", "miss", "stream", "error"], [5, 2, 2, 1])[0]
            headers = call_headers("whoami") | {"authorization": f"Bearer {token}"}
            if kind == "hit":
                body = call_body(
                    request_id, "whoami", {"text": f"{SECRET_WORD}-{rng.randrange(5)}"}
                )
            elif kind == "miss":
                body = call_body(
                    request_id, "whoami", {"text": f"{SECRET_WORD}-{uuid.uuid4().hex}"}
                )
            elif kind == "stream":
                headers = headers | {"mcp-name": "progress"}
                arguments = {"steps": 2, "text": SECRET_WORD}
                body = call_body(request_id, "progress", arguments, progressToken=request_id)
            else:
                headers = headers | {"mcp-name": "broken"}
                body = call_body(request_id, "broken", {})
            stats["calls"] += 1
            try:
                response = await http.post(url, json=body, headers=headers)
                _check(kind, token, request_id, response, stats)
            except Exception as exc:  # every failure is recorded, none may occur
                stats["unexpected"].append(f"{kind}: {exc!r}")

    async def sampler(http: httpx.AsyncClient) -> None:
        while time.monotonic() < deadline:
            text = (await http.get(metrics_url)).text
            stats["max_entries"] = max(stats["max_entries"], metric(text, "mcpcache_cache_entries"))
            stats["max_bytes"] = max(stats["max_bytes"], metric(text, "mcpcache_cache_bytes"))
            rss.append(sidecar.memory_info().rss)
            await asyncio.sleep(0.25)

    async with http_client(timeout=30, limits=httpx.Limits(max_connections=32)) as http:
        await asyncio.gather(sampler(http), *(caller(http, n) for n in range(16)))
    settled = rss[len(rss) // 3 :]
    stats["rss_growth_mib"] = (max(settled) - settled[0]) / 2**20
    return stats


def _check(kind: str, token: str, request_id: str, response: httpx.Response, stats: dict) -> None:
    if kind == "stream":
        assert response.headers["content-type"].startswith("text/event-stream")
        answer = sse_messages(response)[-1]
    else:
        answer = response.json()
    assert response.status_code == 200, response.text
    assert answer["id"] == request_id
    if response.headers.get("cache-status") == "mcpcache; hit":
        stats["hits"] += 1
    if kind == "error":
        assert answer["result"]["isError"] is True
        stats["injected"] += 1
    elif kind == "stream":
        assert answer["result"]["content"][0]["text"].startswith(f"{SECRET_WORD} after 2 steps")
    else:
        assert answer["result"]["content"][0]["text"].startswith(f"user=Bearer {token} text=")
