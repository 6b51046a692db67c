"""What an upstream's answer allows: whether it may be stored and for how long, what
identical requests waiting on it receive, whether a write happened, and when an expired
entry may stand in. Pure functions, like `policy`, which decides the request side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, NamedTuple

from ..cache.store import Scope
from ..config import Server
from .callers import public_keyed
from .headers import cache_directives
from .messages import METADATA_METHODS, CacheScope, NotStoredReason, Verdict
from .policy import ROUTING_HEADERS, Lookup

FAILED_CALL: Final[frozenset[NotStoredReason | None]] = frozenset(
    {"error", "tool_error", "input_required"}
)
"""Answers to a write that show it did not happen; any other end may have written."""

_KEYED_BY_BODY: Final = ROUTING_HEADERS | {"accept", "accept-encoding"}
"""Headers a `Vary` may name without making an answer unstorable: the routing headers
must equal the body (checked before lookup), and every answer has one media type."""


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


FollowerShare = Literal["answer", "failed", "alone"]

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
    status: int, verdict: Verdict, answered: bool, final_kept: bool, public: bool = False
) -> FollowerShare:
    """What requests collapsed onto another identical request (same key) receive.

    `answer`: its final answer, stored or not (an error or `isError` is theirs too).
    `failed`: the upstream failed them all: a server error, or a body that broke off
    before the answer (a stale entry may stand in). `alone`: each forwards on its own,
    also when the answer was too large to keep for them.

    On a `public` key the followers are other callers: they share only an answer that
    was stored for every caller, never an error or an answer kept from the cache (it
    may say who asked)."""
    if status >= 500 or (verdict.reason == "incomplete" and not answered):
        return "failed"
    if not final_kept or (
        verdict.reason is not None and (public or verdict.reason not in _SHARED_WHEN_NOT_STORED)
    ):
        return "alone"
    return "answer"


def scoped(lookup: Lookup, verdict: Verdict, headers: Mapping[str, str]) -> Verdict:
    """A storable answer on a key for every caller (a `scope: public` rule's) that must
    not be shared after all: the server marked the result `private`, or the answer sets
    a cookie (state of the caller who asked, even where `ignoreSetCookie` lets a
    caller's own entry be kept)."""
    if verdict.reason is not None or not lookup.scope.public:
        return verdict
    if verdict.scope == "private" or "set-cookie" in headers:
        return Verdict("private_result")
    return verdict


class Filing(NamedTuple):
    """Where a storable answer is kept: its key, scope and legacy session."""

    key: str
    scope: Scope
    session: str


def filing(server: Server, lookup: Lookup, verdict: Verdict, headers: Mapping[str, str]) -> Filing:
    """The caller's own key, or, under `trustPublicHints`, the key for every caller when
    the server marks the result `public` and nothing in the answer says it depends on
    who asked: no cookie, no `Vary` on an identity header or the session. The sidecar
    never makes a result public that the server did not mark so."""
    if _marked_public(server, lookup, verdict.scope, headers):
        return Filing(lookup.public_key, lookup.scope._replace(public=True), "")
    return Filing(lookup.key, lookup.scope, lookup.session)


def for_everyone(
    server: Server, lookup: Lookup, scope: CacheScope | None, headers: Mapping[str, str]
) -> bool:
    """Whether a storable answer whose result says `scope` is kept for every caller:
    under a `scope: public` rule (`scoped`), or as `filing` files it."""
    if lookup.scope.public:
        return scope != "private" and "set-cookie" not in headers
    return _marked_public(server, lookup, scope, headers)


def _marked_public(
    server: Server, lookup: Lookup, scope: CacheScope | None, headers: Mapping[str, str]
) -> bool:
    if not lookup.public_key or scope != "public" or "set-cookie" in headers:
        return False
    vary = headers.get("vary")
    anyone = public_keyed(lookup.keyed, server.cache.identity_headers)
    return vary is None or _varies_within_key(anyone, vary)


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
