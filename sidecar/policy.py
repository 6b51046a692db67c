"""The cache policy: the one place that decides what is looked up, under which key, and
what is stored for how long — per server, and per tool where the server has rules.

Pure functions over the server's config, the parsed message, the headers and what the
sidecar has learned of the server's tools. The proxy asks; nothing else decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

from .config import Server, ToolRule
from .hints import ToolHints
from .key import cache_key, credential_identity
from .messages import (
    CACHEABLE_METHODS,
    REQUEST_STATE_PARAMS,
    BypassReason,
    Message,
    NotStoredReason,
    Verdict,
)
from .store import Scope

BYPASS_FWD: Final[dict[BypassReason, str]] = {
    "method": "method",  # the cache does not handle this method
    "disabled": "bypass",  # the server's cache is off
    "request_state": "request",  # the request itself rules the cache out
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
    `ttl` seconds, indexed under its `scope`. (A tuple: made on every hit, so cheap.)"""

    key: str
    ttl: float
    server: str
    tool: str | None = None
    uri: str | None = None

    @property
    def scope(self) -> Scope:
        return Scope(self.server, self.tool, self.uri)


def bypass_reason(server: Server, message: Message) -> BypassReason | None:
    """Why this request is never answered from the cache, or None if it may be."""
    if message.method not in CACHEABLE_METHODS or not message.is_request:
        return "method"
    if any(name in message.params for name in REQUEST_STATE_PARAMS):
        return "request_state"
    if not server.cache.enabled:
        return "disabled"
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


def plan(
    server: Server,
    message: Message,
    headers: Mapping[str, str],
    app_id: str,
    hints: ToolHints | None = None,
) -> Bypass | Lookup:
    """Look this request up, and under which key, or forward it untouched."""
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
    assert message.method is not None
    ttl = rule.ttl if rule is not None and rule.ttl is not None else cache.ttl
    if ttl <= 0:
        return Bypass("tool_rule" if rule is not None else "disabled")
    key = cache_key(
        server.name,
        message.method,
        message.params,
        app_id,
        credential_identity(headers.get("authorization")),
        rule.ignore_arguments if rule is not None else (),
    )
    if tool is not None:
        return Lookup(key, ttl, server.name, tool)
    return Lookup(key, ttl, server.name, uri=message.params["uri"])


def response_refusal(status: int, headers: Mapping[str, str]) -> NotStoredReason | None:
    """Why the upstream's answer may not be stored whatever its body says, or None."""
    if status != 200:
        return "upstream_status"
    directives = headers.get("cache-control", "").lower()
    if "no-store" in directives or "private" in directives:
        return "no_store"
    return None


def storage_ttl(lookup: Lookup, verdict: Verdict) -> float:
    """How long a storable answer is kept: the rule's or server's TTL, shortened by the
    result's own freshness hint."""
    ttl = lookup.ttl
    if verdict.ttl_cap is not None:
        ttl = min(ttl, verdict.ttl_cap)
    return ttl


def write_happened(verdict: Verdict) -> bool:
    """Whether a write tool's answer leaves open that it changed something."""
    return verdict.reason not in FAILED_CALL
