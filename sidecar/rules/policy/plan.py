"""The cache policy's plan for a request: forwarded untouched (`Bypass`, and what it
removes once it answers) or looked up (`Lookup`: under which keys, kept how long and
where) — per server, and per tool where the server has rules. `plan` reads in named
steps: why it is never looked up, the tool call (`skipIf`, learned defaults), who is
asking, its keys and how long it is kept (`policy.keys`).

Pure functions over the server's config, the parsed message, the headers and what the
sidecar has learned of the server's tools. The proxy asks; what an answer allows is
`admission`'s to say.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from ...cache.store import Scope
from ...config import Server, ToolRule
from .. import cache_status
from ..cache_status import BypassReason
from ..invalidation.removals import EVERY_ENTRY, Removal
from ..invalidation.writes import doubtful_writes, writes
from ..key.cache_key import caller_digest
from ..key.callers import (
    Caller,
    RequestRefused,
    caller_of,
    unambiguous_caller,
)
from ..learned_tools import LearnedTools
from ..protocol.asked import Asked
from ..protocol.messages import CACHEABLE_METHODS, METADATA_METHODS, REQUEST_STATE_PARAMS, Message
from ..reading.arguments import arguments_of, doubtful
from .arguments import read_arguments, skipped, with_defaults
from .keys import ToolCall, entry_session, kept, request_keys


@dataclass(frozen=True, slots=True)
class Bypass:
    """The request goes upstream without a lookup, and its answer is not stored.

    `invalidates`: the tool writes; once it answers (unless it plainly failed), entries
    of the tools matching these globs go. `learner`: the answer is a `tools/list` whose
    hints the policy needs, and this is the digest of the caller it is shown to."""

    reason: BypassReason
    invalidates: tuple[Removal, ...] = ()
    learner: str | None = None

    @property
    def fwd(self) -> str:
        return cache_status.BYPASS_FWD[self.reason]

    @property
    def detail(self) -> str | None:
        return cache_status.BYPASS_DETAIL.get(self.reason)


class Lookup(NamedTuple):
    """The request is looked up under `key`; on a miss its answer may be stored for
    `ttl` seconds, indexed under its `scope`. `session` is the digest of the legacy
    session its entry belongs to and ends with ("" when the session is not keyed).
    (A tuple: made on every hit, so cheap.)"""

    key: str
    ttl: float
    scope: Scope
    session: str = ""
    keyed: frozenset[str] = frozenset()
    """The request headers the key depends on (an answer may `Vary` on these)."""
    public_key: str = ""
    """Under `trustPublicHints`, for the six results that carry `cacheScope`: the key
    an answer the server marks public is filed under for every caller, looked up when
    the caller's own `key` misses ("" otherwise)."""
    learner: str | None = None
    """As `Bypass.learner`: for a `tools/list` whose answer teaches the policy."""
    context: str = ""
    """On a server that may have entries for every caller: the request's authorization
    context (`context_of`), which the upstream must have answered lately before such an
    entry answers it (`cache.accepted`); "" elsewhere."""
    named_key: str = ""
    """For a call filled from schema defaults: the key of the call that names those
    values, looked up (in memory) when `key` misses, never stored under: the answer to
    a filled call is filed under `key`, apart, since the server may have changed the
    default since its listing ("" otherwise)."""


def bypass_reason(server: Server, message: Message) -> BypassReason | None:
    """Why this request is never answered from the cache, or None if it may be.

    List methods and `server/discover` are looked up only on servers with a
    `metadataTTL`; the key rules are the same as for calls (every cursor is its own
    page, every caller its own entry)."""
    if message.method is None and message.doubt is not None:
        return message.doubt  # not even its method is certain
    if not message.is_request:
        return "method"
    if message.method in METADATA_METHODS:
        if not server.cache.metadata_ttl:
            return "method"
    elif message.method not in CACHEABLE_METHODS:
        return "method"
    if message.doubt is not None:
        return message.doubt
    params = message.params
    if not REQUEST_STATE_PARAMS.isdisjoint(params):
        return "request_state"
    if "task" in params:
        return "task"
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
    server: Server, rule: ToolRule | None, tool: str, hints: LearnedTools
) -> BypassReason | None:
    """Why this tool's calls are not cached on a server that caches, or None. A rule
    that enables the tool outright overrides the server's hints; nothing else does."""
    if rule is not None:
        if rule.enabled is False or rule.invalidates:
            return "tool_rule"
        if rule.enabled:
            return None
    if hints.declared_writer(server.name, tool):
        return "declared_writer"
    if server.cache.only_read_only_tools and not hints.read_only(server.name, tool):
        return "not_read_only"
    return None


def learns_tools(server: Server, message: Message) -> bool:
    """Whether this request's answer teaches what the policy needs of the server's
    tools: which are read-only, and their arguments' defaults."""
    return message.method == "tools/list" and server.cache.enabled


def plan(asked: Asked, app_id: str, hints: LearnedTools | None = None) -> Bypass | Lookup:
    """Look this request up, and under which key, or forward it untouched (and what it
    removes once it answers, when it may write): why it is never looked up, then who is
    asking, its keys, and how long and where its answer is kept."""
    server, message = asked.server, asked.message
    reason = bypass_reason(server, message)
    if reason is not None and reason == message.doubt:
        return Bypass(reason, doubtful_writes(server, message, tool_rule(server, message)))
    rule = tool_rule(server, message) if server.cache.tools else None
    if reason is None and message.method == "tools/call":
        reason, call = _tool_call(asked, rule, hints)
    else:
        call = ToolCall(rule, None, {}, None)
    if reason is not None:
        return _bypass(asked, reason, call.rule)
    try:
        caller = call.caller or caller_of(
            server, asked.headers, asked.raw_headers, asked.bound_session
        )
    except RequestRefused:
        return Bypass("ambiguous_headers")
    keyed = request_keys(asked, call, caller, app_id)
    if keyed is None:
        # Nested deeper than a key can be written. (A write never gets here: its rule
        # made it a `tool_rule` bypass.)
        return Bypass("too_deep")
    ttl, scope = kept(server, message, call, keyed)
    # Worked out only where it is read: by a listing that teaches, and where entries
    # for every caller may be (the contexts the upstream answered count there).
    learns, shares = learns_tools(server, message), server.cache.shares_entries
    context = context_of(caller, asked.query) if learns or shares else ""
    learner = context if learns else None
    accepting = context if shares else ""
    session = entry_session(server, asked.headers, keyed.keyed)
    return Lookup(
        keyed.key, ttl, scope, session, keyed.keyed, keyed.public_key, learner, accepting,
        keyed.named_key,
    )  # fmt: skip


def _tool_call(
    asked: Asked, rule: ToolRule | None, hints: LearnedTools | None
) -> tuple[BypassReason | None, ToolCall]:
    """Why a call of this tool is not looked up (its rule, its server's hints, an
    argument read in doubt, a `skipIf` value), or None; and the call as it is keyed,
    with the defaults learned for its caller filled in."""
    server = asked.server
    cache, params = server.cache, asked.message.params
    tool: str = params["name"]
    call = ToolCall(rule, tool, params, None)
    reason: BypassReason | None = None
    if rule is not None or cache.only_read_only_tools or hints is not None:
        reason = tool_bypass(server, rule, tool, hints or LearnedTools())
    defaults: Mapping[str, object] = {}
    if reason is None and cache.fill_schema_defaults and hints is not None:
        caller = _unambiguous_caller(asked)
        if caller is not None:
            call = call._replace(caller=caller)
            defaults = hints.defaults(server.name, context_of(caller, asked.query), tool)
    if reason is not None:
        return reason, call
    if (rule is not None or defaults or cache.tools) and doubtful(
        params.get("arguments"), read_arguments(server, rule, tool, defaults)
    ):
        return "ambiguous_name", call
    if defaults:
        call = call._replace(filled=with_defaults(params, defaults))
    filled = arguments_of(call.filled)
    if rule is not None and rule.skip_if and skipped(rule, filled):
        return "skip_if", call
    return None, call


def _bypass(asked: Asked, reason: BypassReason, rule: ToolRule | None) -> Bypass:
    """A request forwarded untouched, with what it removes once it answers (a declared
    writer no rule speaks for drops everything of its server) and, for a listing the
    policy learns from, whom it teaches."""
    message = asked.message
    invalidates = (EVERY_ENTRY,) if reason == "declared_writer" else writes(rule, message)
    listener = None
    if learns_tools(asked.server, message):
        listener = _unambiguous_caller(asked)
    learner = context_of(listener, asked.query) if listener is not None else None
    return Bypass(reason, invalidates, learner)


def _unambiguous_caller(asked: Asked) -> Caller | None:
    return unambiguous_caller(asked.server, asked.headers, asked.raw_headers, asked.bound_session)


def context_of(caller: Caller, query: str) -> str:
    """The request's authorization context as one digest (the reading rule in
    `docs/operations/security.md`): the caller as the key sees them (`Caller.digest`:
    every keyed header as sent, the version, the session where it can carry identity,
    being in a session at all) on this query string, which the upstream sees too and may
    answer each user by (`/mcp?user=…`). (The app id is this sidecar's, the same for
    every request it reads.) A listing teaches, and its defaults fill the calls of,
    this context alone; an entry for every caller answers only contexts the upstream
    answered."""
    if not query:
        return caller.digest
    return caller_digest({**caller.who, "query": query})


def public_side(lookup: Lookup) -> Lookup:
    """The lookup of the entry for every caller that `lookup.public_key` names."""
    scope = lookup.scope._replace(public=True)
    return lookup._replace(key=lookup.public_key, scope=scope, session="", public_key="")
