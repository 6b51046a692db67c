"""The cache policy: the one place that decides what is looked up, under which key, and
what is stored for how long — per server, and per tool where the server has rules.

Pure functions over the server's config, the parsed message, the headers and what the
sidecar has learned of the server's tools. The proxy asks; nothing else decides.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple

from .config import Server, ToolRule
from .headers import (
    NOT_KEY_MATERIAL,
    cache_directives,
    connection_named,
    forwarded,
    repeated_or_hidden,
)
from .hints import ToolHints
from .key import cache_key, secret_digest
from .messages import (
    CACHEABLE_METHODS,
    METADATA_METHODS,
    REQUEST_STATE_PARAMS,
    BypassReason,
    Message,
    NotStoredReason,
    Verdict,
    has_inexact_number,
)
from .store import Scope

BYPASS_FWD: Final[dict[BypassReason, str]] = {
    "method": "method",  # the cache does not handle this method
    "disabled": "bypass",  # the server's cache is off
    "request_state": "request",  # the request itself rules the cache out
    "task": "request",  # the caller asked for a task: the work must run
    "inexact_number": "request",  # a number the key could not tell apart from another
    "positional_params": "request",  # params as an array: the key reads objects only
    "tool_rule": "bypass",  # the tool's rule turns caching off (or the tool writes)
    "not_read_only": "bypass",  # onlyReadOnlyTools, and the tool is not known read-only
}
"""RFC 9211 `fwd` values for requests never looked up."""

BYPASS_DETAIL: Final[dict[BypassReason, str]] = {
    "tool_rule": "tool-rule",
    "not_read_only": "not-read-only",
    "positional_params": "positional-params",
}
"""`detail` values that tell apart bypasses sharing one `fwd`."""

FAILED_CALL: Final[frozenset[NotStoredReason | None]] = frozenset(
    {"error", "tool_error", "input_required"}
)
"""Answers to a write that show it did not happen; any other end may have written."""

SESSION_HEADER: Final = "mcp-session-id"
PROTOCOL_HEADER: Final = "mcp-protocol-version"
ROUTING_HEADERS: Final = frozenset({"mcp-method", "mcp-name"})
_KEYED_BY_BODY: Final = ROUTING_HEADERS | {"accept", "accept-encoding"}
"""Headers a `Vary` may name without making an answer unstorable: the routing headers
must equal the body (checked before lookup), and every answer has one media type."""


class RequestRefused(ValueError):
    """The request is ambiguous about who is asking; it is answered with 400."""


@dataclass(frozen=True, slots=True)
class Bypass:
    """The request goes upstream without a lookup, and its answer is not stored.

    `invalidates`: the tool writes; once it answers (unless it plainly failed), entries
    of the tools matching these globs go. `learn_tools`: the answer is a `tools/list`
    whose read-only hints the policy needs."""

    reason: BypassReason
    invalidates: tuple[str, ...] = ()
    learn_tools: bool = False

    @property
    def fwd(self) -> str:
        return BYPASS_FWD[self.reason]

    @property
    def detail(self) -> str | None:
        return BYPASS_DETAIL.get(self.reason)


class Lookup(NamedTuple):
    """The request is looked up under `key`; on a miss its answer may be stored for
    `ttl` seconds, indexed under its `scope`. `session` is the digest of the legacy
    session it belongs to ("" for none). (A tuple: made on every hit, so cheap.)"""

    key: str
    ttl: float
    scope: Scope
    session: str = ""
    keyed: frozenset[str] = frozenset()
    """The request headers the key depends on (an answer may `Vary` on these)."""


def bypass_reason(server: Server, message: Message) -> BypassReason | None:
    """Why this request is never answered from the cache, or None if it may be.

    List methods and `server/discover` are looked up only on servers with a
    `metadataTTL`; the key rules are the same as for calls (every cursor is its own
    page, every caller its own entry)."""
    if not message.is_request:
        return "method"
    if message.method in METADATA_METHODS:
        if not server.cache.metadata_ttl:
            return "method"
    elif message.method not in CACHEABLE_METHODS:
        return "method"
    if message.positional:
        return "positional_params"
    params = message.params
    if not REQUEST_STATE_PARAMS.isdisjoint(params):
        return "request_state"
    if "task" in params:
        return "task"
    if not server.cache.enabled:
        return "disabled"
    if has_inexact_number(message.raw):
        return "inexact_number"
    return None


def tool_rule(server: Server, message: Message) -> ToolRule | None:
    """The rule for a `tools/call`, or None for other methods and unmatched tools."""
    if message.method != "tools/call":
        return None
    name = message.params.get("name")
    return server.cache.rule_for(name) if isinstance(name, str) else None


def tool_bypass(
    server: Server, rule: ToolRule | None, tool: str, hints: ToolHints
) -> BypassReason | None:
    """Why this tool's calls are not cached on a server that caches, or None."""
    if rule is not None:
        if rule.enabled is False or rule.invalidates:
            return "tool_rule"
        if rule.enabled:
            return None
    if server.cache.only_read_only_tools and not hints.read_only(server.name, tool):
        return "not_read_only"
    return None


def learns_tools(server: Server, message: Message) -> bool:
    """Whether this request's answer teaches which of the server's tools are read-only."""
    return message.method == "tools/list" and server.cache.only_read_only_tools


def keyed_headers(
    server: Server, headers: Mapping[str, str], hidden: frozenset[str] = frozenset()
) -> frozenset[str]:
    """Every request header the key depends on: each one present that reaches the
    upstream (`hidden`: those a `Connection` header keeps from it), but for the few that
    cannot carry identity or change the answer and the server's `ignoreHeaders`; and the
    identity headers, the session and the version whether present or not."""
    cache = server.cache
    return _keyed(cache.identity_headers, cache.ignore_headers, tuple(headers), hidden)


@functools.lru_cache(maxsize=512)
def _keyed(
    identity_headers: tuple[str, ...],
    ignored: tuple[str, ...],
    present: tuple[str, ...],
    hidden: frozenset[str],
) -> frozenset[str]:
    # Memoised: a client sends the same header names on every call.
    material = {
        name
        for name in present
        if forwarded(name)
        and name not in NOT_KEY_MATERIAL
        and name not in ignored
        and name not in hidden
    }
    return frozenset({*material, *identity_headers, SESSION_HEADER, PROTOCOL_HEADER})


@functools.lru_cache(maxsize=64)
def unambiguous_headers(identity_headers: tuple[str, ...]) -> frozenset[str]:
    """Headers a request must send at most once and must not hide behind `Connection`:
    the credentials, the session and the version (servers differ in which copy of a
    repeated credential they read), and the routing headers. Any other keyed header is
    keyed on exactly as sent, every copy in order."""
    return frozenset({*identity_headers, SESSION_HEADER, PROTOCOL_HEADER, *ROUTING_HEADERS})


def extra_keyed_headers(server: Server, keyed: frozenset[str]) -> frozenset[str]:
    """The keyed headers beyond the identity headers, the session and the version: what
    an operator looks at when calls that should hit keep missing."""
    return keyed - unambiguous_headers(server.cache.identity_headers)


def session_scope(server: Server, session_id: str) -> str:
    """A legacy session, as the cache knows it: one server's session, by digest."""
    return secret_digest(f"{server.name}\0{session_id}")


def identity(
    server: Server,
    headers: Mapping[str, str],
    keyed: frozenset[str],
    raw_headers: Sequence[tuple[str, str]] = (),
) -> dict[str, str]:
    """Who is asking, as key material: a digest of each keyed header present (any of
    them may be a credential, the session id too) and the protocol version as it is. A
    header sent more than once (`raw_headers`) is keyed on every copy in order, so that
    two copies never share an entry with one header holding both values."""
    material = {
        f"header:{name}": secret_digest(headers[name])
        for name in keyed
        if name in headers and name != PROTOCOL_HEADER
    }
    if len(raw_headers) > len(headers):
        copies: dict[str, list[str]] = {}
        for name, value in raw_headers:
            copies.setdefault(name.lower(), []).append(value)
        for name, values in copies.items():
            if len(values) > 1 and f"header:{name}" in material:
                material[f"header:{name}"] = secret_digest("\n".join(values))
    if PROTOCOL_HEADER in headers:
        material["protocol"] = headers[PROTOCOL_HEADER]
    return material


def plan(
    server: Server,
    message: Message,
    headers: Mapping[str, str],
    raw_headers: Sequence[tuple[str, str]],
    app_id: str,
    hints: ToolHints | None = None,
) -> Bypass | Lookup:
    """Look this request up, and under which key, or forward it untouched.

    Raises `RequestRefused` when the headers the key depends on are ambiguous.
    """
    cache = server.cache
    reason = bypass_reason(server, message)
    rule = tool_rule(server, message) if cache.tools else None
    tool: str | None = None
    if reason is None and message.method == "tools/call":
        tool = message.params["name"]
        if rule is not None or cache.only_read_only_tools:
            reason = tool_bypass(server, rule, tool, hints or ToolHints())
    if reason is not None:
        invalidates = rule.invalidates if rule is not None else ()
        return Bypass(reason, invalidates, learns_tools(server, message))
    hidden: frozenset[str] = frozenset()
    # Only a request with a repeated header or a `Connection` header can be ambiguous.
    if len(raw_headers) != len(headers) or "connection" in headers:
        problem = repeated_or_hidden(raw_headers, unambiguous_headers(cache.identity_headers))
        if problem is not None:
            raise RequestRefused(problem)
        hidden = frozenset(connection_named(raw_headers))
    keyed = keyed_headers(server, headers, hidden)
    assert message.method is not None
    who = identity(server, headers, keyed, raw_headers)
    ignored = rule.ignore_arguments if rule is not None else ()
    key = cache_key(server.name, message.method, message.params, app_id, who, ignored)
    session_id = headers.get(SESSION_HEADER)
    session = session_scope(server, session_id) if session_id else ""
    if tool is not None:
        ttl = rule.ttl if rule is not None and rule.ttl is not None else cache.ttl
        scope = Scope(server.name, tool=tool)
    elif message.method == "resources/read":
        ttl, scope = cache.ttl, Scope(server.name, uri=message.params["uri"])
    else:
        ttl, scope = cache.metadata_ttl or cache.ttl, Scope(server.name, listing=message.method)
    return Lookup(key, ttl, scope, session, keyed)


def response_refusal(
    server: Server,
    lookup: Lookup,
    status: int,
    headers: Mapping[str, str],
    event_stream: bool,
) -> NotStoredReason | None:
    """Why the upstream's answer may not be stored whatever its body says, or None.

    The rules of RFC 9111 for a shared cache, read from the answer's headers, with one
    reading of our own: `no-cache` on an event stream is the convention every SSE server
    follows so that intermediaries pass the stream on unbuffered (the SDK's servers send
    it on every stream), not a statement about the JSON-RPC result inside it; on a JSON
    answer it means what it says. `no-store`, `private` and a zero lifetime count on both.
    """
    if status != 200:
        return "upstream_status"
    directives = cache_directives(headers.get("cache-control", ""))
    if "no-store" in directives or "private" in directives:
        return "no_store"
    if ("no-cache" in directives and not event_stream) or _max_age(directives) == 0:
        return "no_cache"
    if "vary" in headers and not _varies_within_key(lookup.keyed, headers["vary"]):
        return "vary"
    if "set-cookie" in headers and not server.cache.ignore_set_cookie:
        return "set_cookie"
    return None


def _max_age(directives: Mapping[str, str | None]) -> float | None:
    """The freshness lifetime the upstream gives a shared cache (`s-maxage` first)."""
    for name in ("s-maxage", "max-age"):
        argument = directives.get(name)
        if argument is not None:
            try:
                return max(0.0, float(int(argument)))
            except ValueError:
                return 0.0  # an unreadable lifetime is treated as stale at once
    return None


def _varies_within_key(keyed: frozenset[str], vary: str) -> bool:
    names = {name.strip().lower() for name in vary.split(",") if name.strip()}
    return "*" not in names and names <= keyed | _KEYED_BY_BODY


def storage_ttl(
    server: Server,
    verdict: Verdict,
    headers: Mapping[str, str],
    method: str | None = None,
    planned: float | None = None,
) -> float:
    """How long a storable answer is kept: the TTL the plan chose (`planned`: a tool
    rule's), else the server's (`metadataTTL` for lists and discovery), shortened by the
    result's own freshness hint and by the upstream's `max-age`/`s-maxage`."""
    ttl = server.cache.ttl
    if method in METADATA_METHODS and server.cache.metadata_ttl:
        ttl = server.cache.metadata_ttl
    if planned is not None:
        ttl = planned
    if verdict.ttl_cap is not None:
        ttl = min(ttl, verdict.ttl_cap)
    max_age = _max_age(cache_directives(headers.get("cache-control", "")))
    if max_age is not None:
        ttl = min(ttl, max_age)
    return ttl


FollowerShare = Literal["shared", "failed", "alone"]

_SHARED_WHEN_NOT_STORED: Final[frozenset[NotStoredReason]] = frozenset(
    {"error", "tool_error", "ttl_zero", "too_large", "over_budget"}
)
"""Answers not stored that are still every identical request's answer. Any other reason
(a status other than 200 and the headers that explain it, what the upstream marked
private or as varying on a header outside the key, a cookie, a question for the client,
an answer that depends on the client's reply, a task handle, a session's reused id, a
number that would not survive re-encoding) keeps the answer for the one request that
went upstream: the list is of what may be shared, so a new reason is never shared."""


def follower_share(
    status: int, verdict: Verdict, answered: bool, final_kept: bool
) -> FollowerShare:
    """What requests collapsed onto another identical request (same key) receive.

    `shared`: its final answer, stored or not (an error or `isError` is theirs too).
    `failed`: the upstream failed them all: a server error, or a body that broke off
    before the answer (a stale entry may stand in). `alone`: each forwards on its own,
    also when the answer was too large to keep for them."""
    if status >= 500 or (verdict.reason == "incomplete" and not answered):
        return "failed"
    if not final_kept or (
        verdict.reason is not None and verdict.reason not in _SHARED_WHEN_NOT_STORED
    ):
        return "alone"
    return "shared"


def stale_while_revalidating(server: Server, expires_at: float, now: float) -> bool:
    """An expired entry may answer at once while it is fetched again."""
    return now < expires_at + (server.cache.stale_while_revalidate or 0.0)


def stale_on_error(server: Server, expires_at: float, now: float) -> bool:
    """An expired entry may answer because the upstream failed."""
    return now < expires_at + (server.cache.stale_if_error or 0.0)


def write_happened(verdict: Verdict, status: int) -> bool:
    """Whether a write tool's answer leaves open that it changed something.

    No: a 4xx (the upstream refused the request before acting on it: unauthenticated,
    malformed, unknown session), a JSON-RPC error, an `isError` result, or a call waiting
    for input. Yes: any other end once the upstream accepted the request — a result, a
    5xx, a stream that broke off or ended without an answer, an answer too large to read
    to its end — since the write may have been done before it."""
    if 400 <= status < 500:
        return False
    return verdict.reason not in FAILED_CALL
