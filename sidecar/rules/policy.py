"""The cache policy: the one place that decides what is looked up, under which key, and
what is stored for how long — per server, and per tool where the server has rules.

Pure functions over the server's config, the parsed message, the headers and what the
sidecar has learned of the server's tools. The proxy asks; nothing else decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import orjson

from ..cache.store import Scope
from ..config import Server, ToolRule
from . import arguments, cache_status
from .arguments import EVERY_ENTRY, Removal
from .callers import (
    PROTOCOL_HEADER,
    SESSION_HEADER,
    Caller,
    RequestRefused,
    anyone_identity,
    caller_of,
    credential_digest,
    public_keyed,
    unambiguous_caller,
)
from .key import NOTHING_ELSE, Sent, cache_key, caller_digest, secret_digest
from .learned_tools import LearnedTools
from .messages import (
    CACHEABLE_METHODS,
    METADATA_METHODS,
    REQUEST_STATE_PARAMS,
    BypassReason,
    Message,
)

SCOPED_RESULTS: Final = METADATA_METHODS | {"resources/read"}
"""The six results that carry `cacheScope` (the 2026-07-28 specification)."""


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
    credential: str = ""
    """For a lookup that may meet an entry for every caller: the digest of the caller's
    credentials ("" for none), which the upstream must have accepted lately before such
    an entry answers it (`cache.credentials`)."""
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


def session_scope(server: Server, session_id: str) -> str:
    """A legacy session, as the cache knows it: one server's session, by digest."""
    return secret_digest(f"{server.name}\0{session_id}")


class _Call(NamedTuple):
    """What the policy reads of a request before it keys it: the tool rule, the tool,
    the params with learned defaults filled in, and the caller they were learned for."""

    rule: ToolRule | None
    tool: str | None
    filled: dict[str, Any]
    caller: Caller | None


def plan(
    server: Server,
    message: Message,
    headers: Mapping[str, str],
    raw_headers: Sequence[tuple[str, str]],
    app_id: str,
    hints: LearnedTools | None = None,
    query: str = "",
    bound_session: bool = False,
) -> Bypass | Lookup:
    """Look this request up, and under which key, or forward it untouched (and what it
    removes once it answers, when it may write): why it is never looked up, then who is
    asking, its keys, and how long and where its answer is kept.

    `query` is the request's query string: the upstream sees it, so the key holds it.
    `bound_session`: its legacy session is keyed, as on a `sessionScoped` server (one
    not opened here with exactly this request's credentials: `upstream.sessions`)."""
    reason = bypass_reason(server, message)
    if reason is not None and reason == message.doubt:
        return Bypass(reason, doubtful_writes(server, message))
    call = _Call(tool_rule(server, message) if server.cache.tools else None, None, {}, None)
    if reason is None and message.method == "tools/call":
        reason, call = _tool_call(
            server, message, call.rule, headers, raw_headers, hints, bound_session
        )
    if reason is not None:
        return _bypass(server, message, reason, call.rule, headers, raw_headers, bound_session)
    try:
        caller = call.caller or caller_of(server, headers, raw_headers, bound_session)
    except RequestRefused:
        return Bypass("ambiguous_headers")
    keyed = _keys(server, message, call, caller, headers, raw_headers, app_id, query)
    if keyed is None:
        # Nested deeper than a key can be written. (A write never gets here: its rule
        # made it a `tool_rule` bypass.)
        return Bypass("too_deep")
    ttl, scope = _kept(server, message, call, keyed)
    learner = caller_digest(caller.who) if learns_tools(server, message) else None
    # Where entries for every caller may be, the upstream's acceptance is recorded.
    shares = server.cache.shares_entries
    credential = credential_digest(server, headers) if shares else ""
    session = _session(server, headers, keyed.keyed)
    return Lookup(
        keyed.key, ttl, scope, session, keyed.keyed, keyed.public_key, learner, credential,
        keyed.named_key,
    )  # fmt: skip


def _tool_call(
    server: Server,
    message: Message,
    rule: ToolRule | None,
    headers: Mapping[str, str],
    raw_headers: Sequence[tuple[str, str]],
    hints: LearnedTools | None,
    bound_session: bool,
) -> tuple[BypassReason | None, _Call]:
    """Why a call of this tool is not looked up (its rule, its server's hints, an
    argument read in doubt, a `skipIf` value), or None; and the call as it is keyed,
    with the defaults learned for its caller filled in."""
    cache, params = server.cache, message.params
    tool: str = params["name"]
    call = _Call(rule, tool, params, None)
    reason: BypassReason | None = None
    if rule is not None or cache.only_read_only_tools or hints is not None:
        reason = tool_bypass(server, rule, tool, hints or LearnedTools())
    defaults: Mapping[str, object] = {}
    if reason is None and cache.fill_schema_defaults and hints is not None:
        caller = unambiguous_caller(server, headers, raw_headers, bound_session)
        if caller is not None:
            call = call._replace(caller=caller)
            defaults = hints.defaults(server.name, caller.digest, tool)
    if reason is not None:
        return reason, call
    if (rule is not None or defaults or cache.tools) and arguments.doubtful(
        params.get("arguments"), read_arguments(server, rule, tool, defaults)
    ):
        return "ambiguous_name", call
    if defaults:
        call = call._replace(filled=arguments.with_defaults(params, defaults))
    filled = arguments.arguments_of(call.filled)
    if rule is not None and rule.skip_if and arguments.skipped(rule, filled):
        return "skip_if", call
    return None, call


def _bypass(
    server: Server,
    message: Message,
    reason: BypassReason,
    rule: ToolRule | None,
    headers: Mapping[str, str],
    raw_headers: Sequence[tuple[str, str]],
    bound_session: bool,
) -> Bypass:
    """A request forwarded untouched, with what it removes once it answers (a declared
    writer no rule speaks for drops everything of its server) and, for a listing the
    policy learns from, whom it teaches."""
    invalidates = (EVERY_ENTRY,) if reason == "declared_writer" else writes(rule, message)
    listener = None
    if learns_tools(server, message):
        listener = unambiguous_caller(server, headers, raw_headers, bound_session)
    return Bypass(reason, invalidates, listener.digest if listener is not None else None)


class _Keys(NamedTuple):
    """A request's keys: its own (`key`), the named call's (`named_key`, for a call
    filled from defaults), the one for every caller (`public_key`, trustPublicHints)."""

    key: str
    named_key: str
    public_key: str
    public: bool
    """`key` itself is for every caller (a `scope: public` rule)."""
    keyed: frozenset[str]
    params: dict[str, Any]
    """The params `key` was made of."""


def _keys(
    server: Server,
    message: Message,
    call: _Call,
    caller: Caller,
    headers: Mapping[str, str],
    raw_headers: Sequence[tuple[str, str]],
    app_id: str,
    query: str,
) -> _Keys | None:
    """The request's keys; None when it is nested deeper than a key can be written."""
    cache, rule, method = server.cache, call.rule, message.method
    assert method is not None
    keyed, who = caller
    # A key for every caller must still name the protocol version the answer was made
    # under: a session without the version header leaves it unknown, so such a caller
    # keeps entries of its own.
    versioned = PROTOCOL_HEADER in headers or SESSION_HEADER not in headers
    public = rule is not None and rule.scope == "public" and versioned
    params = call.filled or message.params
    if public:
        # Nor defaults: they were learned from this caller's listing, not everyone's.
        keyed = public_keyed(keyed, cache.identity_headers)
        who = anyone_identity(server, headers, keyed, raw_headers)
        params = message.params
    ignored = rule.ignore_arguments if rule is not None else ()
    sent = Sent(query, message.extra) if query or message.extra else NOTHING_ELSE
    named_key = public_key = ""
    try:
        key = cache_key(server.name, method, params, app_id, who, ignored, public, sent)
        if params is not message.params:  # filled: read the named call's, filed apart
            named_key = key
            given = arguments.arguments_of(message.params)
            names = tuple(sorted(n for n in arguments.arguments_of(params) if n not in given))
            apart = sent._replace(filled=names)
            key = cache_key(server.name, method, params, app_id, who, ignored, public, apart)
    except orjson.JSONEncodeError:
        return None
    if cache.trust_public_hints and method in SCOPED_RESULTS and versioned:
        shared = public_keyed(keyed, cache.identity_headers)
        anyone = anyone_identity(server, headers, shared, raw_headers)
        public_key = cache_key(
            server.name, method, message.params, app_id, anyone, ignored, True, sent
        )
    return _Keys(key, named_key, public_key, public, keyed, params)


def _kept(server: Server, message: Message, call: _Call, keys: _Keys) -> tuple[float, Scope]:
    """How long an answer is kept at most, and the scope it is indexed under (the values
    writes `match` on, and whether it is for everyone)."""
    cache, rule, tool = server.cache, call.rule, call.tool
    if tool is not None:
        ttl = rule.ttl if rule is not None and rule.ttl is not None else cache.ttl
        if not cache.tools:
            return ttl, Scope(server.name, tool=tool)
        names = cache.matched_arguments(tool)
        digests = arguments.argument_digests(names, arguments.arguments_of(keys.params))
        return ttl, Scope(server.name, tool=tool, arguments=digests, public=keys.public)
    if message.method == "resources/read":
        return cache.ttl, Scope(server.name, uri=message.params["uri"])
    return cache.metadata_ttl or cache.ttl, Scope(server.name, listing=message.method)


def _session(server: Server, headers: Mapping[str, str], keyed: frozenset[str]) -> str:
    """The legacy session an entry belongs to and ends with: where it is keyed (never
    on a key for every caller)."""
    session_id = headers.get(SESSION_HEADER)
    if session_id and SESSION_HEADER in keyed:
        return session_scope(server, session_id)
    return ""


def read_arguments(
    server: Server, rule: ToolRule | None, tool: str, defaults: Mapping[str, object]
) -> frozenset[str]:
    """The argument names the sidecar reads in a call of `tool`: its rule's `skipIf`
    and `ignoreArguments`, what writes match its entries on, the defaults it fills."""
    names = set(server.cache.matched_arguments(tool)) if server.cache.tools else set()
    names.update(defaults)
    if rule is not None:
        names.update(rule.skip_if)
        names.update(rule.ignore_arguments)
    return frozenset(names)


def public_side(lookup: Lookup) -> Lookup:
    """The lookup of the entry for every caller that `lookup.public_key` names."""
    scope = lookup.scope._replace(public=True)
    return lookup._replace(key=lookup.public_key, scope=scope, session="", public_key="")


def writes(rule: ToolRule | None, message: Message) -> tuple[Removal, ...]:
    """What a call removes once it answers (nothing unless its tool writes). A write
    whose matched arguments may be read otherwise by the upstream (a name given twice,
    case aside) removes every entry of each tool it invalidates."""
    if rule is None or not rule.invalidates:
        return ()
    if arguments.doubtful(message.params.get("arguments"), rule.matched_names):
        return rule.invalidated_globs
    return arguments.removals(rule, arguments.arguments_of(message.params))


def doubtful_writes(server: Server, message: Message) -> tuple[Removal, ...]:
    """What a request the sidecar cannot read with certainty removes once it answers:
    when even its tool may be read otherwise (its method, `params` or the tool's name
    are in doubt), everything any rule of the server invalidates; else what its tool's
    rule invalidates, matched on nothing."""
    if message.method == "tools/call" and message.doubt == "accept":  # its tool is certain
        rule = tool_rule(server, message)
        return rule.invalidated_globs if rule is not None else ()
    globs = {glob for rule in server.cache.tools for glob in rule.invalidated_globs}
    return tuple(sorted(globs))
