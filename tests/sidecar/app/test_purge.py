"""Purging from inside the pod (`/admin/purge`, `/admin/stats`, the CLI over them) and by
a changed purge marker in the followed config file."""

from __future__ import annotations

import asyncio
import http.server
import json
import subprocess
import sys
import threading
from typing import Any, ClassVar

import httpx
import pytest

from peers.clients import LEGACY, call_body, call_headers, http_client, mcp_client, post, unique
from peers.serving import async_wait_until
from peers.sidecar import RunningSidecar, one_server

ALICE = {"authorization": "Bearer alice-secret-token"}


def two_servers(url: str, **docs: Any) -> dict[str, Any]:
    return {
        "appId": "purge-agent",
        "servers": [
            {"name": "docs", "url": url, "cache": {"enabled": True}, **docs},
            {"name": "other", "url": url, "cache": {"enabled": True}},
        ],
    }


async def fill(sidecar: RunningSidecar, text: str, uris: list[str]) -> None:
    """Cache echo and get_doc on both servers, and resources on docs."""
    for server in ("docs", "other"):
        async with mcp_client(sidecar.url(server), headers=ALICE) as client:
            await client.call_tool("echo", {"text": text})
            await client.call_tool("get_doc", {"name": text})
            if server == "docs":
                for uri in uris:
                    await client.read_resource(uri)


async def admin(
    sidecar: RunningSidecar, path: str, body: Any = None, **headers: str
) -> httpx.Response:
    url = f"http://127.0.0.1:{sidecar.port}/admin/{path}"
    async with http_client(timeout=10) as http:
        if body is None:
            return await http.get(url, headers=headers)
        return await http.post(
            url, content=json.dumps(body), headers={"content-type": "application/json", **headers}
        )


def entries(stats: dict[str, Any], server: str) -> dict[str, int]:
    found = {tool: counts["entries"] for tool, counts in stats["servers"][server]["tools"].items()}
    found["(resources)"] = stats["servers"][server]["resources"]["entries"]
    return found


@pytest.fixture
def filled(make_sidecar, upstream) -> tuple[RunningSidecar, str, list[str]]:
    _, app = upstream
    return (
        make_sidecar(two_servers(app.base_url + "/mcp")),
        unique(),
        [
            f"doc://{unique()}",
            f"doc://{unique()}",
        ],
    )


async def test_stats_count_entries_per_server_and_tool_and_name_no_caller(filled) -> None:
    sidecar, text, uris = filled
    await fill(sidecar, text, uris)
    async with mcp_client(sidecar.url("docs"), headers=ALICE) as client:
        await client.call_tool("echo", {"text": text})
    stats = (await admin(sidecar, "stats")).json()
    assert entries(stats, "docs") == {"echo": 1, "get_doc": 1, "(resources)": 2}
    assert entries(stats, "other") == {"echo": 1, "get_doc": 1, "(resources)": 0}
    assert stats["servers"]["docs"]["hits"] == 1
    assert stats["servers"]["docs"]["misses"] == 4
    assert stats["entries"] == 6
    assert stats["bytes"] == sum(s["bytes"] for s in stats["servers"].values()) > 0
    dumped = json.dumps(stats)
    for secret in ("alice", "purge-agent", text, *uris):
        assert secret not in dumped


async def test_purge_by_server_tool_and_uri(filled) -> None:
    sidecar, text, uris = filled
    await fill(sidecar, text, uris)

    async def purge(**body: str) -> int:
        response = await admin(sidecar, "purge", body)
        assert response.status_code == 200, response.text
        return int(response.json()["purged"])

    assert await purge(server="docs", uri=uris[0]) == 1
    assert entries((await admin(sidecar, "stats")).json(), "docs")["(resources)"] == 1
    assert await purge(server="docs", tool="get_*") == 1
    stats = (await admin(sidecar, "stats")).json()
    assert entries(stats, "docs") == {"echo": 1, "(resources)": 1}
    assert entries(stats, "other") == {"echo": 1, "get_doc": 1, "(resources)": 0}
    assert await purge(server="docs") == 2
    stats = (await admin(sidecar, "stats")).json()
    assert stats["servers"]["docs"]["entries"] == 0
    assert stats["servers"]["other"]["entries"] == 2
    assert sidecar.sample("mcpcache_invalidations_total", server="docs", cause="purge") == 3
    assert sidecar.sample("mcpcache_cache_evictions_total", reason="purged") == 4

    peer_calls = (await post(
        sidecar.url("docs"), call_body(1, "echo", {"text": text}), call_headers("echo", **ALICE)
    )).headers["cache-status"]  # fmt: skip
    assert peer_calls.startswith("mcpcache; fwd=miss"), "a purged entry is not served"


@pytest.mark.parametrize(
    ("path", "body", "headers", "status"),
    [
        ("purge", {"server": "docs"}, {"host": "evil.example"}, 403),
        ("purge", {"server": "docs"}, {"origin": "http://evil.example"}, 403),
        ("stats", None, {"host": "evil.example"}, 403),
        ("purge", {"server": "nope"}, {}, 404),
        ("purge", {"server": "docs", "caller": "x"}, {}, 400),
        ("purge", {"server": "docs", "tool": ""}, {}, 400),
        ("purge", {}, {}, 400),
        ("purge", None, {}, 405),
        ("elsewhere", None, {}, 404),
    ],
)
async def test_the_admin_endpoints_refuse_what_they_should(
    filled, path: str, body: Any, headers: dict[str, str], status: int
) -> None:
    sidecar, _, _ = filled
    response = await admin(sidecar, path, body, **headers)
    assert response.status_code == status
    assert "error" in response.json()


async def test_a_purge_must_be_json(filled) -> None:
    sidecar, _, _ = filled
    async with http_client(timeout=10) as http:
        response = await http.post(
            f"http://127.0.0.1:{sidecar.port}/admin/purge",
            content='{"server": "docs"}',
            headers={"content-type": "text/plain"},
        )
    assert response.status_code == 415


async def test_an_answer_fetched_before_a_purge_is_not_stored_after_it(
    make_sidecar, json_upstream
) -> None:
    peer, app = json_upstream
    sidecar = make_sidecar(two_servers(app.base_url + "/mcp"))
    gate = unique()
    body = call_body(1, "slow", {"steps": 0, "gate": gate})
    calls = peer.calls["slow"]
    in_flight = asyncio.create_task(post(sidecar.url("docs"), body, call_headers("slow")))
    try:
        await async_wait_until(lambda: peer.calls["slow"] == calls + 1, what="the call upstream")
        assert (await admin(sidecar, "purge", {"server": "docs"})).status_code == 200
    finally:
        peer.gate(gate).set()
    answered = await in_flight
    assert answered.headers["cache-status"] == "mcpcache; fwd=miss; detail=invalidated"
    again = await post(sidecar.url("docs"), body, call_headers("slow"))
    assert again.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert sidecar.sample("mcpcache_not_stored_total", server="docs", reason="invalidated") == 1


def cli(sidecar: RunningSidecar, *args: str) -> subprocess.CompletedProcess[str]:
    url = f"http://127.0.0.1:{sidecar.port}"
    return subprocess.run(
        [sys.executable, "-m", "mcpcache.sidecar.cli", *args, "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_the_cli_shows_stats_and_purges(filled) -> None:
    sidecar, text, uris = filled
    await fill(sidecar, text, uris)
    table = await asyncio.to_thread(cli, sidecar, "stats")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("6 of 1024 entries")
    assert "upstream calls saved" in lines[0]
    header = ["SERVER", "TOOL", "ENTRIES", "BYTES", "HITS", "MISSES", "SAVED", "SAVED-TIME"]
    assert lines[2].split() == header
    assert lines[3].split()[:3] == ["docs", "*", "4"]
    assert any(line.split()[:2] == ["(resources)", "2"] for line in lines)

    purged = await asyncio.to_thread(cli, sidecar, "purge", "--server", "docs", "--tool", "e*")
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout.strip() == "purged 1 entries of server docs (tools e*)"

    as_json = await asyncio.to_thread(cli, sidecar, "stats", "--output", "json")
    assert json.loads(as_json.stdout)["servers"]["docs"]["entries"] == 3
    unknown = await asyncio.to_thread(cli, sidecar, "purge", "--server", "nope")
    assert unknown.returncode != 0
    assert "unknown MCP server 'nope'" in unknown.stderr


@pytest.mark.slow
async def test_a_changed_purge_marker_in_the_file_drops_that_servers_entries(
    make_sidecar, upstream
) -> None:
    peer, app = upstream
    url = app.base_url + "/mcp"
    sidecar = make_sidecar(two_servers(url, purge="1"))
    text = unique()
    await fill(sidecar, text, [])

    def purges() -> float:
        return sidecar.sample("mcpcache_invalidations_total", server="docs", cause="purge")

    def reloads() -> float:
        return sidecar.sample("mcpcache_config_reloads_total", result="applied")

    sidecar.write_config({**two_servers(url, purge="1"), "appId": "purge-agent-2"})
    await async_wait_until(lambda: reloads() == 1, what="a reload")
    sidecar.write_config(two_servers(url, purge="1"))
    await async_wait_until(lambda: reloads() == 2, what="a second reload")
    assert purges() == 0, "an unchanged marker purges nothing"
    assert len(sidecar.sidecar.cache) == 4

    sidecar.write_config(two_servers(url, purge="2"))
    await async_wait_until(lambda: purges() == 1, what="the purge")
    stats = (await admin(sidecar, "stats")).json()
    assert stats["servers"]["docs"]["entries"] == 0
    assert stats["servers"]["other"]["entries"] == 2
    echoes = peer.calls["echo"]
    async with mcp_client(sidecar.url("docs"), headers=ALICE) as client:
        await client.call_tool("echo", {"text": text})
    assert peer.calls["echo"] == echoes + 1


class _Impostor(http.server.BaseHTTPRequestHandler):
    """A proxy that answers every request itself, as if it were the sidecar."""

    seen: ClassVar[list[str]] = []

    def _answer(self) -> None:
        _Impostor.seen.append(self.path)
        body = json.dumps({"server": "docs", "purged": 42}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


async def test_the_cli_talks_to_the_sidecar_even_with_a_proxy_in_the_environment(
    filled, monkeypatch
) -> None:
    sidecar, text, uris = filled
    await fill(sidecar, text, uris)
    impostor = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Impostor)
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    try:
        proxy = f"http://127.0.0.1:{impostor.server_address[1]}"
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        purged = await asyncio.to_thread(cli, sidecar, "purge", "--server", "docs")
    finally:
        impostor.shutdown()
        impostor.server_close()
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout.strip() == "purged 4 entries of server docs"
    assert _Impostor.seen == []


@pytest.mark.slow
async def test_expired_entries_are_reported_apart_and_reading_stats_drops_nothing(
    make_sidecar, upstream
) -> None:
    _, app = upstream
    document = two_servers(app.base_url + "/mcp")
    document["servers"][0]["cache"] = {"enabled": True, "ttl": "1s", "staleIfError": "1h"}
    sidecar = make_sidecar(document)
    async with mcp_client(sidecar.url("docs"), headers=ALICE) as client:
        await client.call_tool("echo", {"text": unique()})
    async with mcp_client(sidecar.url("other"), headers=ALICE) as client:
        await client.call_tool("echo", {"text": unique()})
    assert sidecar.sample("mcpcache_cache_entries") == 2
    await async_wait_until(
        lambda: sidecar.sample("mcpcache_cache_entries") == 1, what="one entry to expire"
    )
    for _ in range(2):  # reading twice: the first read changed nothing
        stats = (await admin(sidecar, "stats")).json()
        assert (stats["entries"], stats["expiredEntries"]) == (1, 1)
        assert stats["servers"]["docs"]["entries"] == 0
        assert stats["servers"]["other"]["entries"] == 1
        assert sidecar.sample("mcpcache_cache_expired_entries") == 1
        assert sidecar.sample("mcpcache_cache_expired_bytes") > 0
    assert len(sidecar.sidecar.cache) == 2, "the expired entry is kept for stale answers"


async def test_a_tool_name_a_caller_chose_cannot_write_rows_or_escapes_into_the_stats_table(
    make_sidecar, echo_upstream
) -> None:
    # The echo upstream answers (and the sidecar stores) any tool name a caller sends.
    _, app = echo_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs"))
    forged = "x\ndocs  *  999  1Gi  9  9\x1b[2K"
    headers = call_headers("")  # a name no header can carry: the older protocol sends none
    del headers["mcp-name"], headers["mcp-method"]
    headers["mcp-protocol-version"] = LEGACY
    response = await post(sidecar.url("docs"), call_body(1, forged, {}), headers)
    assert response.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    table = await asyncio.to_thread(cli, sidecar, "stats")
    assert table.returncode == 0, table.stderr
    assert "\x1b" not in table.stdout
    assert [line for line in table.stdout.splitlines() if line.startswith("docs")] == [
        line for line in table.stdout.splitlines() if line.split()[:3] == ["docs", "*", "1"]
    ]
