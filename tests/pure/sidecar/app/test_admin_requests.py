"""The admin endpoints on their own, driven as an ASGI app (no sockets): who
may call them, which requests they refuse and why, what a purge removes and what stats
count. The endpoints over a real listener and the CLI: tests/sidecar/app/test_purge.py."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from starlette.types import Message

from mcpcache.sidecar.app.admin import MAX_ADMIN_BODY, Admin
from mcpcache.sidecar.cache.store import ResponseCache, Scope
from mcpcache.sidecar.config import parse_config
from mcpcache.sidecar.edge.errors import FORBIDDEN, UNKNOWN_SERVER
from mcpcache.sidecar.edge.origin import OriginPolicy
from mcpcache.sidecar.metrics import Metrics
from mcpcache.sidecar.proxy.invalidator import Invalidator
from mcpcache.sidecar.rules.learned_tools import LearnedTools
from mcpcache.sidecar.rules.protocol.messages import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR
from peers.clock import Clock

CONFIG = parse_config(
    "servers: [{name: docs, url: 'http://127.0.0.1:1/mcp'}, {name: idle, url: 'http://127.0.0.1:1/mcp'}]"
)

NO_ENTRIES = {
    "entries": 0,
    "bytes": 0,
    "hits": 0,
    "misses": 0,
    "upstreamCallsSaved": 0,
    "upstreamSecondsSaved": 0.0,
    "tools": {},
    "revalidations": {},
    "resources": {"entries": 0, "bytes": 0},
    "lists": {"entries": 0, "bytes": 0},
}
"""A server's stats with nothing live and nothing asked of it."""


class Sidecar:
    """What the admin endpoints steer: a cache with entries of two servers, metrics."""

    def __init__(self) -> None:
        self.clock = Clock(100.0)
        self.cache = ResponseCache(100, 10_000, self.clock)
        self.metrics = Metrics()
        self.invalidator = Invalidator(self.cache, self.metrics, LearnedTools())
        self.admin = Admin(
            lambda: CONFIG, self.cache, self.metrics, self.invalidator, OriginPolicy()
        )
        self.cache.store("s1", b'{"a":1}', False, 60, scope=Scope("docs", tool="search"))
        self.cache.store("s2", b'{"a":22}', False, 60, scope=Scope("docs", tool="search"))
        self.cache.store("g1", b'{"b":333}', False, 60, scope=Scope("docs", tool="get"))
        self.cache.store("r1", b'{"c":4444}', False, 60, scope=Scope("docs", uri="file:///r"))
        self.cache.store("l1", b'{"d":5}', False, 60, scope=Scope("docs", listing="tools/list"))
        self.cache.store("gone", b'{"e":6}', False, 1, scope=Scope("old", tool="t"))

    async def call(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        client: tuple[str, int] | None = ("127.0.0.1", 50000),
    ) -> tuple[int, dict[str, str], Any]:
        sent = {"host": "127.0.0.1:3500", "content-type": "application/json"}
        sent |= headers or {}
        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "query_string": b"",
            "headers": [(k.encode(), v.encode()) for k, v in sent.items() if v],
            "client": client,
        }
        events: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
        sent: list[Message] = []

        async def receive() -> Message:
            return events.pop(0) if events else {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            sent.append(message)

        await self.admin(scope, receive, send)
        start, *bodies = sent
        headers = {k.decode(): v.decode() for k, v in start["headers"]}
        content = b"".join(message.get("body", b"") for message in bodies)
        return start["status"], headers, orjson.loads(content)

    async def purge(self, request: Any) -> tuple[int, Any]:
        status, _, document = await self.call("POST", "/admin/purge", orjson.dumps(request))
        return status, document


def error(document: dict[str, Any]) -> tuple[int, str]:
    return document["error"]["code"], document["error"]["message"]


async def test_stats_count_live_entries_per_server_and_tool() -> None:
    sidecar = Sidecar()
    sidecar.metrics.requests.labels("docs", "tools/call", "hit").inc(3)
    sidecar.metrics.requests.labels("docs", "resources/read", "hit").inc()
    sidecar.metrics.requests.labels("docs", "tools/call", "miss").inc(2)
    sidecar.metrics.requests.labels("docs", "tools/call", "bypass").inc(7)
    for seconds in (0.25, 0.25, 0.5, 0.5):  # the four hits' upstream time
        sidecar.metrics.saved("docs", seconds)
    sidecar.clock.now += 1  # "gone" has expired: counted apart, not as a live entry
    status, headers, stats = await sidecar.call("GET", "/admin/stats")
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert stats == {
        "entries": 5,
        "bytes": stats["bytes"],
        "expiredEntries": 1,
        "expiredBytes": sidecar.cache.get("gone").size,
        "maxEntries": 100,
        "maxBytes": 10_000,
        "hits": 4,
        "misses": 2,
        "upstreamCallsSaved": 4,
        "upstreamSecondsSaved": 1.5,
        "servers": {
            "docs": {
                "entries": 5,
                "bytes": stats["servers"]["docs"]["bytes"],
                "hits": 4,
                "misses": 2,
                "upstreamCallsSaved": 4,
                "upstreamSecondsSaved": 1.5,
                "tools": {
                    "get": {"entries": 1, "bytes": sidecar.cache.get("g1").size},
                    "search": {
                        "entries": 2,
                        "bytes": sidecar.cache.get("s1").size + sidecar.cache.get("s2").size,
                    },
                },
                "revalidations": {},
                "resources": {"entries": 1, "bytes": sidecar.cache.get("r1").size},
                "lists": {"entries": 1, "bytes": sidecar.cache.get("l1").size},
            },
            "idle": NO_ENTRIES,
            "old": NO_ENTRIES,
        },
    }
    live = sum(sidecar.cache.get(k).size for k in ("s1", "s2", "g1", "r1", "l1"))
    assert stats["bytes"] == stats["servers"]["docs"]["bytes"] == live
    assert list(stats["servers"]["docs"]["tools"]) == ["get", "search"], "tools in order"
    assert "gone" in sidecar.cache, "reading stats drops nothing"


async def test_an_entry_is_live_until_the_moment_it_expires() -> None:
    sidecar = Sidecar()
    size = sidecar.cache.get("gone").size
    sidecar.clock.now += 0.5
    _, _, stats = await sidecar.call("GET", "/admin/stats")
    assert stats["servers"]["old"]["tools"] == {"t": {"entries": 1, "bytes": size}}
    sidecar.clock.now += 0.5
    _, _, stats = await sidecar.call("GET", "/admin/stats")
    assert stats["servers"]["old"]["tools"] == {}
    assert (stats["expiredEntries"], stats["expiredBytes"]) == (1, size)


@pytest.mark.parametrize(
    ("request_body", "purged", "left"),
    [
        ({"server": "docs"}, 5, {"gone"}),
        ({"server": "docs", "tool": "search"}, 2, {"g1", "r1", "l1", "gone"}),
        ({"server": "docs", "tool": "*"}, 3, {"r1", "l1", "gone"}),
        ({"server": "docs", "uri": "file:///r"}, 1, {"s1", "s2", "g1", "l1", "gone"}),
        ({"server": "docs", "tool": "get", "uri": "file:///r"}, 2, {"s1", "s2", "l1", "gone"}),
        ({"server": "old"}, 1, {"s1", "s2", "g1", "r1", "l1"}),
        ({"server": "idle"}, 0, {"s1", "s2", "g1", "r1", "l1", "gone"}),
    ],
    ids=["server", "tool", "tool glob", "uri", "tool and uri", "only in cache", "only in config"],
)
async def test_a_purge_removes_what_it_names_and_says_how_many(
    request_body: dict[str, str], purged: int, left: set[str]
) -> None:
    sidecar = Sidecar()
    status, document = await sidecar.purge(request_body)
    assert status == 200
    assert document == {**request_body, "purged": purged}
    assert set(sidecar.cache) == left


@pytest.mark.parametrize(
    ("body", "code", "complaint"),
    [
        (b"{", PARSE_ERROR, "body is not valid JSON: "),
        (b"[]", INVALID_PARAMS, 'expected {"server": ..., "tool"?: ..., "uri"?: ...}'),
        (
            b'{"server": "docs", "tools": "x"}',
            INVALID_PARAMS,
            'expected {"server": ..., "tool"?: ..., "uri"?: ...}',
        ),
        (b"{}", INVALID_PARAMS, '"server" must name a server'),
        (b'{"server": ""}', INVALID_PARAMS, '"server" must name a server'),
        (b'{"server": 1}', INVALID_PARAMS, '"server" must name a server'),
        (b'{"server": "docs", "tool": ""}', INVALID_PARAMS, '"tool" must be a non-empty string'),
        (b'{"server": "docs", "tool": 1}', INVALID_PARAMS, '"tool" must be a non-empty string'),
        (b'{"server": "docs", "uri": ""}', INVALID_PARAMS, '"uri" must be a non-empty string'),
        (b'{"server": "docs", "uri": []}', INVALID_PARAMS, '"uri" must be a non-empty string'),
    ],
)
async def test_a_malformed_purge_is_refused_with_the_reason_and_removes_nothing(
    body: bytes, code: int, complaint: str
) -> None:
    sidecar = Sidecar()
    status, _, document = await sidecar.call("POST", "/admin/purge", body)
    assert status == 400
    assert error(document)[0] == code
    message = error(document)[1]
    # A parse error goes on with the parser's own words; the others are exactly these.
    assert message.startswith(complaint) if code == PARSE_ERROR else message == complaint
    assert len(sidecar.cache) == 6
    assert sidecar.invalidator.epoch("docs") == 0


async def test_a_purge_of_an_unknown_server_is_not_found() -> None:
    sidecar = Sidecar()
    status, document = await sidecar.purge({"server": "nope"})
    assert status == 404
    assert error(document) == (UNKNOWN_SERVER, "unknown MCP server 'nope'")


async def test_a_purge_must_be_json_and_fit_the_body_limit() -> None:
    sidecar = Sidecar()
    body = orjson.dumps({"server": "docs"})
    status, _, document = await sidecar.call(
        "POST", "/admin/purge", body, {"content-type": "text/plain"}
    )
    assert status == 415
    assert error(document) == (INVALID_REQUEST, "Content-Type must be application/json")
    status, _, _ = await sidecar.call("POST", "/admin/purge", b" " * MAX_ADMIN_BODY + body)
    assert status == 413
    status, _, document = await sidecar.call(
        "POST", "/admin/purge", b" " * (MAX_ADMIN_BODY - len(body)) + body
    )
    assert (status, document["purged"]) == (200, 5), "a body of exactly the limit is read"


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/admin/purge", "POST"),
        ("DELETE", "/admin/purge", "POST"),
        ("POST", "/admin/stats", "GET"),
    ],
)
async def test_the_wrong_method_is_refused_with_the_allowed_one(
    method: str, path: str, allowed: str
) -> None:
    sidecar = Sidecar()
    status, headers, document = await sidecar.call(method, path, orjson.dumps({"server": "docs"}))
    assert status == 405
    assert headers["allow"] == allowed
    assert error(document) == (
        INVALID_REQUEST,
        f"method {method} is not allowed here; use {allowed}",
    )
    assert len(sidecar.cache) == 6


async def test_another_admin_path_is_not_found() -> None:
    status, _, document = await Sidecar().call("GET", "/admin/other")
    assert status == 404
    assert error(document) == (INVALID_REQUEST, "no admin endpoint at /admin/other")


@pytest.mark.parametrize(
    "client",
    [("10.0.0.7", 5000), ("not-an-address", 5000), None],
    ids=["remote peer", "unix socket name", "no peer"],
)
async def test_only_loopback_peers_are_served(client: tuple[str, int] | None) -> None:
    sidecar = Sidecar()
    status, _, document = await sidecar.call(
        "POST", "/admin/purge", orjson.dumps({"server": "docs"}), client=client
    )
    assert status == 403
    assert error(document) == (FORBIDDEN, "the admin endpoints serve loopback callers only")
    assert len(sidecar.cache) == 6


async def test_an_ipv6_loopback_peer_is_served() -> None:
    status, _, _ = await Sidecar().call("GET", "/admin/stats", client=("::1", 5000))
    assert status == 200


@pytest.mark.parametrize(
    "headers",
    [{"host": "example.com"}, {"origin": "http://example.com"}],
    ids=["foreign host", "foreign origin"],
)
async def test_a_browser_page_elsewhere_is_refused(headers: dict[str, str]) -> None:
    sidecar = Sidecar()
    status, _, document = await sidecar.call(
        "POST", "/admin/purge", orjson.dumps({"server": "docs"}), headers
    )
    assert status == 403
    code, message = error(document)
    assert code == FORBIDDEN
    assert message.endswith("is not allowed") or "is not allowed:" in message, message
    assert len(sidecar.cache) == 6


async def test_stats_add_up_every_scope_of_a_kind_and_skip_only_the_expired_ones() -> None:
    sidecar = Sidecar()
    cache = sidecar.cache
    cache.purge(list(cache))
    cache.store("early", b'{"x":1}', False, 1, scope=Scope("docs", tool="soon"))
    cache.store("r1", b'{"c":1}', False, 60, scope=Scope("docs", uri="file:///1"))
    cache.store("r2", b'{"c":22}', False, 60, scope=Scope("docs", uri="file:///2"))
    cache.store("l1", b'{"d":1}', False, 60, scope=Scope("docs", listing="tools/list"))
    cache.store("l2", b'{"d":22}', False, 60, scope=Scope("docs", listing="prompts/list"))
    sidecar.clock.now += 1  # the first scope has nothing live: the others still count
    _, _, stats = await sidecar.call("GET", "/admin/stats")
    docs = stats["servers"]["docs"]
    assert docs["tools"] == {}
    assert docs["resources"] == {"entries": 2, "bytes": cache["r1"].size + cache["r2"].size}
    assert docs["lists"] == {"entries": 2, "bytes": cache["l1"].size + cache["l2"].size}
