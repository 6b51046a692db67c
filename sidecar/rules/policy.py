"""The cache policy: the one place that decides what is looked up, under which key, and
what is stored for how long — per server, and per tool where the server has rules.

Pure functions over the server's config, the parsed message, the headers and what the
sidecar has learned of the server's tools. The proxy asks; nothing else decides.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from ..cache.store import Scope
from ..config import Server, ToolRule
from .headers import (
    NOT_KEY_MATERIAL,
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
    has_inexact_number,
)

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

SESSION_HEADER: Final = "mcp-session-id"
PROTOCOL_HEADER: Final = "mcp-protocol-version"
ROUTING_HEADERS: Final = frozenset({"mcp-method", "mcp-name"})


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
