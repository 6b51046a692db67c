"""A request's keys, and how long and where its answer is kept: the steps of `plan`
once it knows the request is looked up and who is asking. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

import orjson

from ...cache.store import Scope
from ...config import Server, ToolRule
from ..invalidation.removals import argument_digests
from ..key.cache_key import (
    NOTHING_ELSE,
    Sent,
    cache_key,
    session_scope,
)
from ..key.callers import (
    PROTOCOL_HEADER,
    SESSION_HEADER,
    Caller,
    anyone_identity,
    public_keyed,
)
from ..protocol.asked import Asked
from ..protocol.messages import METADATA_METHODS, Message
from ..reading.arguments import arguments_of

SCOPED_RESULTS: Final = METADATA_METHODS | {"resources/read"}
"""The six results that carry `cacheScope` (the 2026-07-28 specification)."""


class ToolCall(NamedTuple):
    """What the policy reads of a request before it keys it: the tool rule, the tool,
    the params with learned defaults filled in, and the caller they were learned for."""

    rule: ToolRule | None
    tool: str | None
    filled: dict[str, Any]
    caller: Caller | None


class Keys(NamedTuple):
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


def request_keys(asked: Asked, call: ToolCall, caller: Caller, app_id: str) -> Keys | None:
    """The request's keys; None when it is nested deeper than a key can be written."""
    server, message, headers, raw_headers, query, _ = asked
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
            given = arguments_of(message.params)
            names = tuple(sorted(n for n in arguments_of(params) if n not in given))
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
    return Keys(key, named_key, public_key, public, keyed, params)


def kept(server: Server, message: Message, call: ToolCall, keys: Keys) -> tuple[float, Scope]:
    """How long an answer is kept at most, and the scope it is indexed under (the values
    writes `match` on, and whether it is for everyone)."""
    cache, rule, tool = server.cache, call.rule, call.tool
    if tool is not None:
        ttl = rule.ttl if rule is not None and rule.ttl is not None else cache.ttl
        if not cache.tools:
            return ttl, Scope(server.name, tool=tool)
        names = cache.matched_arguments(tool)
        digests = argument_digests(names, arguments_of(keys.params))
        return ttl, Scope(server.name, tool=tool, arguments=digests, public=keys.public)
    if message.method == "resources/read":
        return cache.ttl, Scope(server.name, uri=message.params["uri"])
    return cache.metadata_ttl or cache.ttl, Scope(server.name, listing=message.method)


def entry_session(server: Server, headers: Mapping[str, str], keyed: frozenset[str]) -> str:
    """The legacy session an entry belongs to and ends with: where it is keyed (never
    on a key for every caller)."""
    session_id = headers.get(SESSION_HEADER)
    if session_id and SESSION_HEADER in keyed:
        return session_scope(server, session_id)
    return ""
