"""A client's JSON-RPC message as the sidecar reads it: the methods the cache knows, the
message read with certainty or with why it is in doubt (`read_message`), and its
`Mcp-Method`/`Mcp-Name` headers held against the body. Pure, no I/O. What is cached is
decided in `policy`, from these facts.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..cache_status import Doubt
from ..reading.body import Members, Spelling, Unreadable, read

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


class Message:
    """A decoded client-to-server JSON-RPC message (request, notification or response);
    the fields the proxy consults are read out once, when the message is parsed.

    `doubt` says why the sidecar cannot read it with certainty: then it goes upstream
    as sent and uncached. A message whose method or id is itself in doubt (`unread`) is
    neither a request nor a notification to the sidecar."""

    __slots__ = ("body", "doubt", "extra", "id", "is_request", "method", "params", "raw")

    def __init__(self, body: dict[str, Any], raw: bytes = b"", doubt: Doubt | None = None) -> None:
        self.body = body
        self.raw = raw
        self.doubt = doubt
        method = body.get("method")
        self.method: str | None = method if isinstance(method, str) else None
        self.id: Any = body.get("id")
        self.is_request = self.method is not None and "id" in body
        params = body.get("params")
        self.params: dict[str, Any] = params if isinstance(params, dict) else {}
        self.extra: dict[str, Any] | None = None
        """Top-level members JSON-RPC does not define: the upstream sees them, so the
        key holds them."""

    @property
    def progress_token(self) -> Any:
        """The request's `_meta.progressToken` (None: it sent none), which the server's
        progress notifications for it carry."""
        meta = self.params.get("_meta")
        return meta.get("progressToken") if isinstance(meta, dict) else None

    @classmethod
    def unread(cls, raw: bytes, doubt: Doubt) -> Message:
        """A body that is not one JSON-RPC message the sidecar can read with certainty."""
        return cls(_UNREAD, raw, doubt)


_UNREAD: Final[dict[str, Any]] = {}

_MEMBERS: Final = frozenset({"jsonrpc", "id", "method", "params", "result", "error"})

_FOLDED_MEMBERS: Final = frozenset(name.casefold() for name in _MEMBERS)

_PARAMS: Final = frozenset(
    {"name", "uri", "arguments", "_meta", "cursor", "task", *REQUEST_STATE_PARAMS}
)
"""The `params` members the sidecar reads (the key and the rules)."""

_FOLDED_PARAMS: Final = frozenset(name.casefold() for name in _PARAMS)

PARSE_ERROR: Final = -32700

INVALID_REQUEST: Final = -32600

INVALID_PARAMS: Final = -32602

HEADER_MISMATCH: Final = -32020


def read_message(raw: bytes) -> Message:
    """One client message as the sidecar reads it (`reading.body`), with why it is in doubt.

    Nothing is refused here: a body the sidecar cannot read with certainty is still
    forwarded, as sent, and answered by the upstream; only the cache steps aside.
    - not JSON, not an object, not JSON-RPC 2.0, an id or method of the wrong type, or a
      cacheable method without its name: `unreadable` (the upstream's own error
      answers it);
    - a batch (the 2025-03-26 protocol's): `batch`;
    - a name given twice, or twice after case folding, where the sidecar reads (the
      top level, `params`, `params._meta`): `ambiguous_name`;
    - `params` an array: `positional_params` (the key reads params as an object).
    Top-level members JSON-RPC does not define are kept in `extra`, key material.

    An object `read` hands back as a `dict` never holds two names equal after
    case folding (it would be `Members`), so only a name standing alone can still be
    read as another: `Method` beside no `method`, `Task` in `params`. (Folding every
    name again took two fifths of the time of reading an SDK client's `tools/call`.)
    """
    try:
        body = read(raw)
    except Unreadable as exc:
        return Message.unread(raw, exc.reason)
    if type(body) is not dict:
        if isinstance(body, list):
            return Message.unread(raw, "batch")
        if isinstance(body, Members):
            return Message.unread(raw, "ambiguous_name")
        return Message.unread(raw, "unreadable")
    extra = None if _MEMBERS.issuperset(body) else [n for n in body if n not in _MEMBERS]
    if extra and any(name.casefold() in _FOLDED_MEMBERS for name in extra):
        return Message.unread(raw, "ambiguous_name")  # `Method` is `method` to Go
    if body.get("jsonrpc") != "2.0" or not _valid_id(body):
        return Message.unread(raw, "unreadable")
    if "method" in body and type(body["method"]) is not str:
        return Message.unread(raw, "unreadable")
    message = Message(body, raw, _params_doubt(body["params"]) if "params" in body else None)
    if type(message.id) is Spelling:  # an id a hit could not write back
        message.doubt = "unreadable"
    if extra:
        message.extra = {name: body[name] for name in extra}
    method = message.method
    if (
        message.is_request
        and message.doubt is None
        and method in CACHEABLE_METHODS
        and type(message.params.get(NAME_PARAM[method])) is not str
    ):
        message.doubt = "unreadable"
    return message


def _valid_id(body: dict[str, Any]) -> bool:
    if "id" not in body:
        return True
    kind = type(body["id"])
    return kind in _ID_TYPES or (kind is not bool and issubclass(kind, str | int | float))


_ID_TYPES: Final = frozenset({str, int, float, type(None), Spelling})


def _params_doubt(params: Any) -> Doubt | None:
    """Why `params` (as `read` gives it) is in doubt, or None. A `dict` holds no
    two names equal after case folding, its `_meta` neither, unless that is `Members`."""
    if type(params) is not dict:
        if isinstance(params, list):
            return "positional_params"
        if isinstance(params, Members):
            return "ambiguous_name"
        return "unreadable"
    if not _PARAMS.issuperset(params) and not _FOLDED_PARAMS.isdisjoint(
        name.casefold() for name in params if name not in _PARAMS
    ):
        return "ambiguous_name"  # `Task` alone is `task` to Go: a call the cache must not answer
    if type(params.get("_meta")) is Members:
        return "ambiguous_name"
    return None


def decode_header_value(value: str) -> str:
    """Undo the `=?base64?...?=` form MCP clients use for non-ASCII header values."""
    if value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return value
    return value


def routing_header_mismatch(
    headers: Mapping[str, str],
    message: Message,
    raw_headers: Sequence[tuple[str, str]] = (),
) -> str | None:
    """Why the `Mcp-Method` / `Mcp-Name` headers disagree with the body, or None.

    Checked before any lookup: otherwise a request could name one tool in its headers,
    another in its body, and be answered with the wrong tool's cached result. A header
    sent more than once (`raw_headers`, as sent) disagrees when any copy does; copies
    that all agree are no disagreement (such a request goes upstream uncached, as any
    repeated routing header does: `key.callers.unambiguous_headers`).
    """
    for value in _copies("mcp-method", headers, raw_headers):
        if value != message.method:
            return "Mcp-Method header does not match the request body's method"
    name_key = NAME_PARAM.get(message.method or "")
    if name_key is None or not isinstance(message.body.get("params"), dict):
        return None  # no name to compare, or the upstream judges the params
    name = message.params.get(name_key)
    for value in _copies("mcp-name", headers, raw_headers):
        if decode_header_value(value) != name:
            return f"Mcp-Name header does not match the request body's {name_key!r} parameter"
    return None


def _copies(
    name: str, headers: Mapping[str, str], raw_headers: Sequence[tuple[str, str]]
) -> Sequence[str]:
    """Each value of a header as sent: one, or (repeated) every copy in order."""
    value = headers.get(name)
    if value is None:
        return ()
    if len(raw_headers) <= len(headers):  # no header was sent twice
        return (value,)
    return [copy for sent, copy in raw_headers if sent == name]


def method_label(method: str | None) -> str:
    if method is None:
        return "response"
    return method if method in KNOWN_METHODS else "other"
