"""A final JSON-RPC response as the cache reads and writes it: whether its result may
be stored (`judge_response`), the bytes a result is stored as, and a stored result
framed again as a response under another request's id. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import orjson

from ...cache.entry import Layout, Note, encode, notes_size
from ..cache_status import NotStoredReason


@dataclass(slots=True)
class Verdict:
    """Whether a final JSON-RPC response may be stored, and for how long at most.

    Never changed once made (`dataclasses.replace` makes another). Not declared frozen:
    a frozen class's constructor makes a call per field, and every answer is judged."""

    reason: NotStoredReason | None
    result: bytes = b""
    ttl_cap: float | None = None
    ttl_at: int = 0
    """Where the value of the result's `ttlMs` starts in `result` (0: it has none)."""
    scope: CacheScope | None = None
    """The result's own `cacheScope`, when it says one."""
    layout: Layout | None = field(default=None, compare=False)
    """Where a hit writes into `result` (read from `result`, so not compared)."""
    notes: tuple[Note, ...] = ()
    """The notifications a hit replays before the result (`protocol.notifications`)."""

    @property
    def size(self) -> int:
        """What the entry takes: the result and the notifications before it."""
        return len(self.result) + notes_size(self.notes)


CacheScope = Literal["public", "private"]


def judge_response(response: Mapping[str, Any]) -> Verdict:
    """Decide whether the upstream's final response to a cacheable call may be stored."""
    if "error" in response or "result" not in response:
        return Verdict("error")
    result = response["result"]
    if (unanswered := not_an_answer(result)) is not None:
        return Verdict(unanswered)
    ttl_cap: float | None = None
    ttl_ms = result.get("ttlMs")
    if isinstance(ttl_ms, int | float) and not isinstance(ttl_ms, bool):
        if ttl_ms <= 0:
            return Verdict("ttl_zero")
        ttl_cap = ttl_ms / 1000
    encoded, layout = encode(result)
    return Verdict(None, encoded, ttl_cap, layout.ttl_at, cache_scope(result), layout)


def not_an_answer(result: Any) -> NotStoredReason | None:
    """Why a `result` is not the call's own answer, or None when it is: not an object,
    `isError`, a request for more input (`input_required`: a sign-in asked for, say), a
    handle to a task (work still running: a repeat must run it), any other `resultType`
    but `complete`. Only the call's own answer is stored, and only it shows that the
    upstream served the caller (`cache.accepted`): the others it gives to anyone it
    refuses as well."""
    if not isinstance(result, dict):
        return "error"
    if result.get("isError") is True:
        return "tool_error"
    result_type = result.get("resultType")
    if result_type == "input_required":
        return "input_required"
    if result_type == "task" or "task" in result:
        return "task"
    if result_type not in (None, "complete"):
        return "incomplete"
    return None


def cache_scope(result: Mapping[str, Any]) -> CacheScope | None:
    """The result's own `cacheScope`, when it says one the protocol defines."""
    scope = result.get("cacheScope")
    return scope if scope in _SCOPES else None


_SCOPES: Final = ("public", "private")


def encode_result(result: Mapping[str, Any]) -> tuple[bytes, int]:
    """A result's stored bytes (see `cache.entry.encode`) and the offset of its `ttlMs`
    value: a hit restates the remaining freshness there without re-encoding."""
    encoded, layout = encode(result)
    return encoded, layout.ttl_at


def is_server_request(message: Mapping[str, Any]) -> bool:
    """A server-to-client request (sampling, elicitation, roots) inside a response stream."""
    return isinstance(message.get("method"), str) and "id" in message


_RESPONSE_HEAD = b'{"jsonrpc":"2.0","id":'

RESULT: Final = b',"result":'

ERROR: Final = b',"error":'
"""The member that follows the id in a framed response."""

_EVENT_HEAD = b"event: message\ndata: "


def frame_response(
    request_id: Any,
    result: bytes | memoryview,
    event: bool = False,
    member: bytes = RESULT,
    tail: bytes = b"",
) -> bytes:
    """The JSON-RPC response bytes for a stored result (or, with `member=ERROR`, an
    error) under the caller's own id, as plain JSON or as one SSE `message` event (JSON
    never contains a raw newline). `tail` follows `result` inside the member's value."""
    parts = [_RESPONSE_HEAD, orjson.dumps(request_id), member, result, tail, b"}"]
    if event:
        parts.insert(0, _EVENT_HEAD)
        parts.append(b"\n\n")
    return b"".join(parts)


def frame_parts(
    request_id: Any, parts: tuple[bytes | memoryview, ...], event: bool = False
) -> bytes:
    """`frame_response` for a result given as parts to join (a hit's, see `Entry`)."""
    if event:
        return b"".join((_EVENT_RESPONSE_HEAD, orjson.dumps(request_id), RESULT, *parts, b"}\n\n"))
    return b"".join((_RESPONSE_HEAD, orjson.dumps(request_id), RESULT, *parts, b"}"))


_EVENT_RESPONSE_HEAD: Final = _EVENT_HEAD + _RESPONSE_HEAD


def frame_event(data: bytes) -> bytes:
    """One SSE `message` event carrying `data`."""
    return b"".join((_EVENT_HEAD, data, b"\n\n"))
