"""MCP message rules: decoding and checking JSON-RPC messages, judging a final response,
and framing stored results. Pure functions; no I/O. What is cached is decided in
`policy`, from these facts.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import orjson

from ..cache.entry import Layout, encode

CACHEABLE_METHODS: Final = frozenset({"tools/call", "resources/read"})
METADATA_METHODS: Final = frozenset(
    {"tools/list", "prompts/list", "resources/list", "resources/templates/list", "server/discover"}
)
"""Results the 2026-07-28 specification marks cacheable besides `resources/read`: cached
only where the server's `metadataTTL` says so."""
NAME_PARAM: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
"""The params member each name-bearing method mirrors into the `Mcp-Name` header."""

KNOWN_METHODS: Final = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "subscriptions/listen",
        "tasks/get",
        "tasks/list",
        "tasks/result",
        "tasks/cancel",
    }
)
"""Methods that get their own metrics label; anything else is counted as `other`."""

REQUEST_STATE_PARAMS: Final = frozenset({"inputResponses", "requestState"})

BypassReason = Literal[
    "method",
    "disabled",
    "request_state",
    "task",
    "inexact_number",
    "too_deep",
    "positional_params",
    "tool_rule",
    "not_read_only",
    "skip_if",
]
NotStoredReason = Literal[
    "error",
    "tool_error",
    "input_required",
    "task",
    "no_cache",
    "vary",
    "set_cookie",
    "inexact_number",
    "id_reused",
    "server_request",
    "too_large",
    "too_deep",
    "no_store",
    "ttl_zero",
    "upstream_status",
    "incomplete",
    "over_budget",
    "invalidated",
    "private_result",
]


class MalformedMessage(ValueError):
    """The body is not a single JSON-RPC message this proxy can route."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Message:
    """A decoded client-to-server JSON-RPC message (request, notification or response);
    the fields the proxy consults are read out once, when the message is parsed."""

    __slots__ = ("body", "id", "is_request", "method", "params", "positional", "raw")

    def __init__(self, body: dict[str, Any], raw: bytes = b"") -> None:
        self.body = body
        self.raw = raw
        method = body.get("method")
        self.method: str | None = method if isinstance(method, str) else None
        self.id: Any = body.get("id")
        self.is_request = self.method is not None and "id" in body
        params = body.get("params")
        self.params: dict[str, Any] = params if isinstance(params, dict) else {}
        self.positional = isinstance(params, list)
        """`params` given by position (an array): JSON-RPC allows it, MCP never sends it,
        and the key only knows params as an object, so such a request is never cached."""


_MEMBERS: Final = frozenset({"jsonrpc", "id", "method", "params", "result", "error"})
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
INVALID_PARAMS: Final = -32602
HEADER_MISMATCH: Final = -32020


def parse_message(raw: bytes) -> Message:
    """Decode one JSON-RPC message; raise MalformedMessage with the JSON-RPC code."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedMessage(PARSE_ERROR, f"request body is not valid JSON: {exc}") from exc
    if isinstance(body, list):
        raise MalformedMessage(INVALID_REQUEST, "JSON-RPC batches are not supported")
    if not isinstance(body, dict):
        raise MalformedMessage(INVALID_REQUEST, "request body must be a JSON-RPC object")
    if body.get("jsonrpc") != "2.0":
        raise MalformedMessage(INVALID_REQUEST, 'request body must have "jsonrpc": "2.0"')
    if not _MEMBERS.issuperset(body):  # `Method` beside `method` is one to Go's reader
        extra = min(set(body) - _MEMBERS)[:64]
        raise MalformedMessage(INVALID_REQUEST, f"{extra!r} is not a JSON-RPC member")
    message = Message(body, raw)
    method = body.get("method")
    if "method" in body and not isinstance(method, str):
        raise MalformedMessage(INVALID_REQUEST, '"method" must be a string')
    if "params" in body and not isinstance(body["params"], dict | list):
        raise MalformedMessage(INVALID_REQUEST, '"params" must be an object')
    if message.is_request:
        _check_id(body["id"])
        name_key = NAME_PARAM.get(message.method or "")
        needs_name = name_key is not None and message.method in CACHEABLE_METHODS
        if needs_name and not isinstance(message.params.get(name_key or ""), str):
            raise MalformedMessage(
                INVALID_PARAMS, f'{message.method} needs a string "{name_key}" in params'
            )
    return message


def _check_id(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, str | int | float | type(None)):
        raise MalformedMessage(INVALID_REQUEST, '"id" must be a string or a number')


def decode_header_value(value: str) -> str:
    """Undo the `=?base64?...?=` form MCP clients use for non-ASCII header values."""
    if value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return value
    return value


def routing_header_mismatch(headers: Mapping[str, str], message: Message) -> str | None:
    """Why the `Mcp-Method` / `Mcp-Name` headers disagree with the body, or None.

    Checked before any lookup: otherwise a request could name one tool in its headers,
    another in its body, and be answered with the wrong tool's cached result.
    """
    header_method = headers.get("mcp-method")
    if header_method is not None and header_method != message.method:
        return "Mcp-Method header does not match the request body's method"
    header_name = headers.get("mcp-name")
    name_key = NAME_PARAM.get(message.method or "")
    if (
        header_name is not None
        and name_key is not None
        and decode_header_value(header_name) != message.params.get(name_key)
    ):
        return f"Mcp-Name header does not match the request body's {name_key!r} parameter"
    return None


def method_label(method: str | None) -> str:
    if method is None:
        return "response"
    return method if method in KNOWN_METHODS else "other"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a final JSON-RPC response may be stored, and for how long at most."""

    reason: NotStoredReason | None
    result: bytes = b""
    ttl_cap: float | None = None
    ttl_at: int = 0
    """Where the value of the result's `ttlMs` starts in `result` (0: it has none)."""
    scope: CacheScope | None = None
    """The result's own `cacheScope`, when it says one."""
    layout: Layout | None = field(default=None, compare=False)
    """Where a hit writes into `result` (read from `result`, so not compared)."""


CacheScope = Literal["public", "private"]


def judge_response(response: Mapping[str, Any]) -> Verdict:
    """Decide whether the upstream's final response to a cacheable call may be stored."""
    if "error" in response or "result" not in response:
        return Verdict("error")
    result = response["result"]
    if not isinstance(result, dict):
        return Verdict("error")
    if result.get("isError") is True:
        return Verdict("tool_error")
    result_type = result.get("resultType")
    if result_type == "input_required":
        return Verdict("input_required")
    if result_type == "task" or "task" in result:
        return Verdict("task")  # a handle to work still running: a repeat must run it
    if result_type not in (None, "complete"):
        return Verdict("incomplete")
    ttl_cap: float | None = None
    ttl_ms = result.get("ttlMs")
    if isinstance(ttl_ms, int | float) and not isinstance(ttl_ms, bool):
        if ttl_ms <= 0:
            return Verdict("ttl_zero")
        ttl_cap = ttl_ms / 1000
    encoded, layout = encode(result)
    return Verdict(None, encoded, ttl_cap, layout.ttl_at, cache_scope(result), layout)


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
