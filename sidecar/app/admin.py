"""Steering the cache from inside the pod: `POST /admin/purge`, `GET /admin/stats` and
`GET /admin/suggest`.

Served on the proxy's own loopback listener, behind the same Host/Origin guard, and
only to loopback peers: whoever can reach these can already call the servers. Neither
says anything about callers: stats count entries per server and tool, a purge removes
a server's, a tool's or a resource's entries for every caller alike, and suggestions
come from digests of answers (see `cache.observations`).

Routed by a FastAPI app (`admin_api`) that is loaded on the first request that passes
the guards: an idle sidecar, which is never asked, never imports FastAPI (about 6 MiB:
benchmarks/idle_memory.py).
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any, Final

import orjson
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..cache.observations import Observations
from ..cache.proposals import propose
from ..cache.store import ResponseCache
from ..config import SidecarConfig
from ..edge.errors import FORBIDDEN, UNKNOWN_SERVER, ProxyError
from ..edge.incoming import Incoming
from ..edge.origin import OriginPolicy
from ..metrics import Metrics
from ..proxy.invalidator import Invalidator
from ..rules.protocol.messages import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR
from ..rules.reading.headers import JSON, media_type

PURGE_PATH: Final = "/admin/purge"
STATS_PATH: Final = "/admin/stats"
SUGGEST_PATH: Final = "/admin/suggest"
MAX_ADMIN_BODY: Final = 16 << 10
_PURGE_FIELDS: Final = {"server", "tool", "uri"}


def _loopback_peer(scope: Scope) -> bool:
    client = scope.get("client")
    if not client:
        return False
    try:
        return ipaddress.ip_address(client[0]).is_loopback
    except ValueError:
        return False


def json_response(document: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(document), status, media_type="application/json")


class Admin:
    def __init__(
        self,
        config: Any,
        cache: ResponseCache,
        metrics: Metrics,
        invalidator: Invalidator,
        origin_policy: OriginPolicy,
        observations: Observations | None = None,
    ) -> None:
        self._config = config
        self.observations = observations if observations is not None else Observations()
        self.cache = cache
        self.metrics = metrics
        self.invalidator = invalidator
        self.origin_policy = origin_policy
        self._routes: asyncio.Future[ASGIApp] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self._refusal(scope, Incoming(scope, receive))
        if refusal is not None:
            await refusal.to_response()(scope, receive, send)
            return
        await (await self._api())(scope, receive, send)

    def _refusal(self, scope: Scope, incoming: Incoming) -> ProxyError | None:
        """Judged before anything is loaded: a refused caller never makes the sidecar
        import FastAPI."""
        if (problem := self.origin_policy.refusal(incoming.headers)) is not None:
            return ProxyError(403, FORBIDDEN, problem)
        if not _loopback_peer(scope):
            return ProxyError(403, FORBIDDEN, "the admin endpoints serve loopback callers only")
        return None

    async def _api(self) -> ASGIApp:
        if self._routes is None:
            # Imported off the event loop: FastAPI takes about a tenth of a second to
            # load, which the proxy's requests would otherwise wait through.
            self._routes = asyncio.ensure_future(asyncio.to_thread(_load_api, self))
        # Shielded: the first caller hanging up must not cancel the load for the others.
        return await asyncio.shield(self._routes)

    async def purge(self, incoming: Incoming) -> Response:
        # JSON only: a browser cannot send it cross-origin without a preflight.
        if media_type(incoming.headers) != JSON:
            raise ProxyError(415, INVALID_REQUEST, "Content-Type must be application/json")
        config: SidecarConfig = self._config()
        raw = await incoming.read_body(MAX_ADMIN_BODY)
        try:
            request = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ProxyError(400, PARSE_ERROR, f"body is not valid JSON: {exc}") from exc
        if not isinstance(request, dict) or set(request) - _PURGE_FIELDS:
            raise ProxyError(
                400, INVALID_PARAMS, 'expected {"server": ..., "tool"?: ..., "uri"?: ...}'
            )
        server, tool, uri = (request.get(k) for k in ("server", "tool", "uri"))
        if not isinstance(server, str) or not server:
            raise ProxyError(400, INVALID_PARAMS, '"server" must name a server')
        for name, value in (("tool", tool), ("uri", uri)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ProxyError(400, INVALID_PARAMS, f'"{name}" must be a non-empty string')
        if config.server(server) is None and server not in self.cache.servers():
            raise ProxyError(404, UNKNOWN_SERVER, f"unknown MCP server {server!r}")
        removed = self.invalidator.purge(server, tool, uri)
        await self.invalidator.announced(server)  # the other replicas are told first
        scope = {k: v for k, v in (("tool", tool), ("uri", uri)) if v is not None}
        return json_response({"server": server, **scope, "purged": removed})

    def stats(self) -> dict[str, Any]:
        """Live entries and bytes per server and tool, requests per outcome and the
        upstream calls and time the cache saved since start.
        Reading them changes nothing (expired entries are counted apart, not dropped)."""
        now = self.cache.timer()
        outcomes = self.metrics.outcomes()
        saved = self.metrics.saved_by_server()
        names = sorted({s.name for s in self._config().servers} | set(self.cache.servers()))
        servers: dict[str, Any] = {}
        for name in names:
            tools: dict[str, dict[str, int]] = {}
            resources = {"entries": 0, "bytes": 0}
            lists = {"entries": 0, "bytes": 0}
            for scope, keys in self.cache.scopes(name).items():
                live = [
                    entry.size
                    for key in keys
                    if (entry := self.cache.get(key)) is not None and entry.expires_at > now
                ]
                if not live:
                    continue
                slot = resources if scope.uri is not None else lists
                if scope.tool is not None:
                    slot = tools.setdefault(scope.tool, {"entries": 0, "bytes": 0})
                slot["entries"] += len(live)
                slot["bytes"] += sum(live)
            counted = outcomes.get(name, {})
            calls_saved, seconds_saved = saved.get(name, (0.0, 0.0))
            servers[name] = {
                "entries": sum(t["entries"] for t in (*tools.values(), resources, lists)),
                "bytes": sum(t["bytes"] for t in (*tools.values(), resources, lists)),
                "hits": int(counted.get("hit", 0)),
                "misses": int(counted.get("miss", 0)),
                "upstreamCallsSaved": int(calls_saved),
                "upstreamSecondsSaved": round(seconds_saved, 3),
                "tools": dict(sorted(tools.items())),
                "revalidations": self.observations.revalidations(name),
                "resources": resources,
                "lists": lists,
            }
        census = self.cache.census()
        return {
            "entries": census.entries,
            "bytes": census.bytes,
            "expiredEntries": census.expired_entries,
            "expiredBytes": census.expired_bytes,
            "maxEntries": self.cache.max_entries,
            "maxBytes": self.cache.max_bytes,
            "hits": sum(s["hits"] for s in servers.values()),
            "misses": sum(s["misses"] for s in servers.values()),
            "upstreamCallsSaved": sum(s["upstreamCallsSaved"] for s in servers.values()),
            "upstreamSecondsSaved": round(
                sum(s["upstreamSecondsSaved"] for s in servers.values()), 3
            ),
            "servers": servers,
        }

    def suggest(self) -> dict[str, Any]:
        """Per server and tool: what the upstream's answers showed and a suggested TTL;
        per server, the evidence in counts (which the CLI adds up over replicas) and the
        tool rules it proposes (never applied: a person copies them into the MCPServer)."""
        names = sorted({s.name for s in self._config().servers} | set(self.observations.servers()))
        evidence = {name: self.observations.evidence(name) for name in names}
        return {
            "servers": {name: self.observations.suggest(name) for name in names},
            "evidence": evidence,
            "proposals": {
                name: [{"rule": p.rule, "evidence": p.evidence} for p in propose(seen)]
                for name, seen in evidence.items()
            },
        }


def _load_api(admin: Admin) -> ASGIApp:
    from .admin_api import admin_api

    return admin_api(admin)


def not_allowed(method: str, allowed: str) -> ProxyError:
    return ProxyError(
        405,
        INVALID_REQUEST,
        f"method {method} is not allowed here; use {allowed}",
        headers={"allow": allowed},
    )
