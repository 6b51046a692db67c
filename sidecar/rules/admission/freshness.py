"""The operator's freshness, written into the cache hint of the six results that carry one.

The 2026-07-28 revision lets `tools/list`, `prompts/list`, `resources/list`,
`resources/templates/list`, `resources/read` and `server/discover` say how long a client
may keep them (`ttlMs`). Some SDKs send 0 by default, which makes every compliant client
ask again on every turn. Once the operator has said how long such a result stays good
(`metadataTTL` on the server), a result that says 0 or nothing is stored for that long
and leaves with `ttlMs` saying so: on the miss (the freshness the entry was stored for)
and on every hit (the freshness left). A positive `ttlMs` is the server's own word and
is honoured as before. A rewritten result also says `cacheScope: "private"` unless the
sidecar keeps it for every caller: an absent scope reads as public, and a client or a
shared cache downstream must not share for minutes what the sidecar keeps per caller
(a scope is narrowed, never widened).

Only an answer that was stored is rewritten: its entry's life is then known, and the
hint never promises more than it. A miss streams to its client as it comes, so the
answer is rewritten only where it is whole in hand: a JSON answer (read whole before its
headers go), or the event that carries it in an event stream when that event's data
arrived in the one chunk that ended it (the usual case: an SDK writes each event at
once); an event split across chunks passes as the upstream sent it, and its hits
carry the hint. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from ...cache.entry import encode
from ...config import Server
from ..protocol.messages import METADATA_METHODS
from ..protocol.results import Verdict, cache_scope, frame_response

HINTED_METHODS: Final = METADATA_METHODS | {"resources/read"}
"""The six results that carry `ttlMs` and `cacheScope`."""


def overrides(server: Server, method: str | None, final: Any) -> bool:
    """Whether the operator's freshness stands in for this answer's own `ttlMs` (0 or
    none) on its way out."""
    if not server.cache.metadata_ttl or method not in HINTED_METHODS:
        return False
    result = final.get("result") if isinstance(final, dict) else None
    if not isinstance(result, dict):
        return False
    if "ttlMs" not in result:
        return True
    ttl = result["ttlMs"]
    return isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl <= 0


def storable(verdict: Verdict, final: dict[str, Any], for_everyone: bool) -> Verdict:
    """The verdict on an answer whose `ttlMs` the operator overrides: one refused only
    for its `ttlMs: 0` (every other check came before that one) may now be stored, laid
    out with a `ttlMs` a hit restates, and `cacheScope: "private"` unless it is kept
    `for_everyone`."""
    if verdict.reason not in (None, "ttl_zero"):
        return verdict
    result = final["result"]
    encoded, layout = encode(result, ttl_ms=0, scope=None if for_everyone else "private")
    return Verdict(None, encoded, None, layout.ttl_at, cache_scope(result), layout)


def restated(verdict: Verdict, ttl: float) -> bytes:
    """The stored result with `ttlMs` as the entry's whole life (`ttl` seconds)."""
    return verdict.result[: verdict.ttl_at] + b"%d}" % int(ttl * 1000)


def rewritten_body(request_id: Any, result: bytes, event_stream: bool) -> bytes:
    """A whole JSON-RPC answer carrying `result` (an event when `event_stream`)."""
    return frame_response(request_id, result, event_stream)


def event_editor(old: bytes, new: bytes) -> Callable[[bytes], bytes]:
    """What rewrites the chunk an answer event ended in: its data `old` becomes `new`,
    when `old` is whole in that chunk; otherwise the chunk passes unchanged."""

    def edit(chunk: bytes) -> bytes:
        at = chunk.find(old) if old else -1
        if at < 0:
            return chunk
        return b"".join((chunk[:at], new, chunk[at + len(old) :]))

    return edit


def stale_while_revalidating(server: Server, expires_at: float, now: float) -> bool:
    """An expired entry may answer at once while it is fetched again."""
    return now < expires_at + (server.cache.stale_while_revalidate or 0.0)


def stale_on_error(server: Server, expires_at: float, now: float) -> bool:
    """An expired entry may answer because the upstream failed."""
    return now < expires_at + (server.cache.stale_if_error or 0.0)
