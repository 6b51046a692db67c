"""The cache policy: the one place that decides what is looked up, under which key, and
what is stored for how long — per server, and per tool where the server has rules.

Pure functions over the server's config, the parsed message, the headers and what the
sidecar has learned of the server's tools. The proxy asks; nothing else decides.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from .config import Server, ToolRule
from .headers import cache_directives, repeated_or_hidden
from .hints import ToolHints
from .key import cache_key, secret_digest
from .messages import (
    CACHEABLE_METHODS,
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
    "tool_rule": "bypass",  # the tool's rule turns caching off (or the tool writes)
    "not_read_only": "bypass",  # onlyReadOnlyTools, and the tool is not known read-only
}
"""RFC 9211 `fwd` values for requests never looked up."""

BYPASS_DETAIL: Final[dict[BypassReason, str]] = {
    "tool_rule": "tool-rule",
    "not_read_only": "not-read-only",
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
CREDENTIAL_LIKE: Final = re.compile(
    r"auth|token|key|secret|session|cookie|passw|credential|signature|user|tenant|account"
)
"""Header names that look like they identify someone. Such a header is keyed on even
when `identityHeaders` does not list it: a credential the upstream sees must never be
left out of the key because nobody thought to list it (fail closed)."""
_NOT_CREDENTIALS: Final = frozenset({"user-agent"})


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
    server: str
    tool: str | None = None
    uri: str | None = None
    session: str = ""
    keyed: frozenset[str] = frozenset()
    """The request headers the key depends on (an answer may `Vary` on these)."""

    @property
    def scope(self) -> Scope:
        return Scope(self.server, self.tool, self.uri)


def bypass_reason(server: Server, message: Message) -> BypassReason | None:
    """Why this request is never answered from the cache, or None if it may be."""
    if message.method not in CACHEABLE_METHODS or not message.is_request:
        return "method"
    params = message.params
    if any(name in params for name in REQUEST_STATE_PARAMS):
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


def keyed_headers(server: Server, headers: Mapping[str, str]) -> frozenset[str]:
    """Every request header the key depends on: the configured identity headers, any
    header present whose name looks like a credential, the session and the version."""
    return _keyed(server.cache.identity_headers, tuple(headers))


@functools.lru_cache(maxsize=512)
def _keyed(identity_headers: tuple[str, ...], present: tuple[str, ...]) -> frozenset[str]:
    # Memoised: a client sends the same header names on every call.
    looks_like = {
        name
        for name in present
        if CREDENTIAL_LIKE.search(name) is not None and name not in _NOT_CREDENTIALS
    }
    return frozenset({*identity_headers, *looks_like, SESSION_HEADER, PROTOCOL_HEADER})


def session_scope(server: Server, session_id: str) -> str:
    """A legacy session, as the cache knows it: one server's session, by digest."""
    return secret_digest(f"{server.name}\0{session_id}")


def identity(server: Server, headers: Mapping[str, str], keyed: frozenset[str]) -> dict[str, str]:
    """Who is asking, as key material: a digest of each keyed header present (they are
    credentials, the session id too) and the protocol version as it is."""
    material = {
        f"header:{name}": secret_digest(headers[name])
        for name in keyed
        if name in headers and name != PROTOCOL_HEADER
    }
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
        learn = message.method == "tools/list" and cache.only_read_only_tools
        return Bypass(reason, rule.invalidates if rule is not None else (), learn)
    ttl = rule.ttl if rule is not None and rule.ttl is not None else cache.ttl
    keyed = keyed_headers(server, headers)
    # Only a request with a repeated header or a `Connection` header can be ambiguous.
    if len(raw_headers) != len(headers) or "connection" in headers:
        problem = repeated_or_hidden(raw_headers, keyed | ROUTING_HEADERS)
        if problem is not None:
            raise RequestRefused(problem)
    assert message.method is not None
    who = identity(server, headers, keyed)
    ignored = rule.ignore_arguments if rule is not None else ()
    key = cache_key(server.name, message.method, message.params, app_id, who, ignored)
    session_id = headers.get(SESSION_HEADER)
    session = session_scope(server, session_id) if session_id else ""
    if tool is not None:
        return Lookup(key, ttl, server.name, tool, session=session, keyed=keyed)
    uri = message.params["uri"]
    return Lookup(key, ttl, server.name, uri=uri, session=session, keyed=keyed)


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


def storage_ttl(lookup: Lookup, verdict: Verdict, headers: Mapping[str, str]) -> float:
    """How long a storable answer is kept: the rule's or server's TTL, shortened by the
    result's own freshness hint and by the upstream's `max-age`/`s-maxage`."""
    ttl = lookup.ttl
    if verdict.ttl_cap is not None:
        ttl = min(ttl, verdict.ttl_cap)
    max_age = _max_age(cache_directives(headers.get("cache-control", "")))
    if max_age is not None:
        ttl = min(ttl, max_age)
    return ttl


def write_happened(verdict: Verdict) -> bool:
    """Whether a write tool's answer leaves open that it changed something."""
    return verdict.reason not in FAILED_CALL
