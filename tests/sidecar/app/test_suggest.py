"""`GET /admin/suggest` and `mcpcache suggest` from a known traffic pattern: a tool whose
answers never change, one whose answers differ on every call; and the tool rules it
proposes from SDK clients' traffic, printed as a block the config model accepts."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import pytest
import yaml

from mcpcache.sidecar.config.files import parse_config
from peers.clients import call_body, call_headers, http_client, mcp_client, post, unique
from peers.serving import past
from peers.sidecar import RunningSidecar, one_server


async def call(sidecar: RunningSidecar, tool: str, arguments: dict[str, Any]) -> None:
    response = await post(
        sidecar.url("s"), call_body(1, tool, arguments), call_headers(tool), seconds=10
    )
    assert response.status_code == 200


def cli(sidecar: RunningSidecar, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpcache.sidecar.cli", "suggest", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"MCPCACHE_LISTEN_PORT": str(sidecar.port), "PATH": ""},
    )


@pytest.mark.slow
async def test_suggest_reports_what_repeated_calls_showed_and_applies_nothing(
    make_sidecar, json_upstream
) -> None:
    document = one_server(json_upstream[1].base_url + "/mcp", ttl="1s")
    sidecar = make_sidecar(document)
    stable, changing = {"text": unique()}, {"text": unique()}
    started = time.monotonic()
    await call(sidecar, "stable", stable)  # one miss each, then misses once expired
    await call(sidecar, "echo", changing)
    await call(sidecar, "stable", {"text": unique()})  # a key asked only once
    stored = time.monotonic()  # every entry so far expires a second after this at the latest
    for moment in (stored + 1.05, started + 4.3):
        await past(moment)
        await call(sidecar, "stable", stable)
        await call(sidecar, "echo", changing)

    async with http_client(timeout=5) as http:
        answer = (await http.get(f"http://127.0.0.1:{sidecar.port}/admin/suggest")).json()
    tools = answer["servers"]["s"]
    assert tools["stable"]["calls"] == 4, "two keys, one of them asked three times"
    assert tools["stable"]["repeats"] == 2
    assert tools["stable"]["verdict"] == "never changed"
    assert 4.0 <= tools["stable"]["stableSeconds"] < 30
    assert tools["stable"]["suggestedTTL"] == "1s"
    assert tools["echo"] == {
        "calls": 3,
        "repeats": 2,
        "changed": 2,
        "stableSeconds": None,
        "suggestedTTL": None,
        "verdict": "answers differ",
    }
    assert sidecar.source.current.servers[0].cache.ttl == 1, "nothing applied by itself"

    as_json = await asyncio.to_thread(cli, sidecar, "--output", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["servers"]["s"]["echo"]["verdict"] == "answers differ"
    table = await asyncio.to_thread(cli, sidecar)
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()]
    header = "SERVER TOOL CALLS REPEATS ANSWERS STABLE FOR SUGGESTED TTL"
    assert rows[0] == header.split()
    assert rows[1] == ["s", "echo", "3", "2", "answers", "differ", "-", "no", "suggestion"]
    assert rows[2] == ["s", "stable", "4", "2", "never", "changed", "4s", "1s"]
    assert "nothing is applied" in table.stdout


@pytest.mark.slow
async def test_suggest_prints_tool_rules_the_config_accepts_with_their_evidence(
    make_sidecar, own_upstream
) -> None:
    upstream_url = own_upstream[1].base_url + "/mcp"
    sidecar = make_sidecar(one_server(upstream_url, ttl="1h"))
    name, word = unique(), unique()
    ana = mcp_client(sidecar.url("s"), headers={"authorization": "Bearer ana"})
    ben = mcp_client(sidecar.url("s"), headers={"authorization": "Bearer ben"})
    async with ana, ben:
        await ana.list_tools()  # the listing declares update_doc a write
        for text in ("one", "two", "three"):
            await ana.call_tool("get_doc", {"name": name})
            await ana.call_tool("stable", {"text": word})
            await ben.call_tool("stable", {"text": word})
            await ana.call_tool("update_doc", {"name": name, "text": text})
        await ana.call_tool("get_doc", {"name": name})

    printed = await asyncio.to_thread(cli, sidecar, "--output", "yaml")
    assert printed.returncode == 0, printed.stderr
    block = yaml.safe_load(printed.stdout)
    assert block["tools"] == [
        {"name": "update_doc", "invalidates": [{"tool": "get_doc", "match": ["name"]}]},
        {"name": "stable", "scope": "public"},
    ], printed.stdout
    assert (
        "get_doc: changed across it alone 3, with other writes 0, unchanged 0;"
        " name lined up in every change across it alone"
    ) in printed.stdout
    assert "stable: unchanged across it 4" in printed.stdout
    for private in (name, word, "ana", "ben", "three"):
        assert private not in printed.stdout, "counts only: no value, answer or caller"
    # Pasted under the server's cache, the config model takes it as it is.
    document = one_server(upstream_url, ttl="1h", tools=block["tools"])
    rules = parse_config(yaml.safe_dump(document)).servers[0].cache.tools
    assert [(r.name, r.scope) for r in rules] == [("update_doc", "private"), ("stable", "public")]
    assert sidecar.source.current.servers[0].cache.tools == (), "nothing applied by itself"
