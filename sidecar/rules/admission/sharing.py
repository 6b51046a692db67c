"""Who else an answer is for: what identical requests waiting on it receive, and
whether a storable answer is filed for its caller alone or for every caller. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, NamedTuple

from ...cache.store import Scope
from ...config import Server
from ..cache_status import NotStoredReason
from ..key.callers import public_keyed
from ..policy.plan import Lookup
from ..protocol.results import CacheScope, Verdict
from .capture import ResponseCapture
from .response_headers import varies_within_key

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


class Filing(NamedTuple):
    """Where a storable answer is kept: its key, scope and legacy session."""

    key: str
    scope: Scope
    session: str


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


def early_share(
    status: int, capture: ResponseCapture, refused: NotStoredReason | None
) -> FollowerShare | None:
    """What identical requests waiting on an answer receive before it is judged, when
    that is already known: nothing of an answer refused by its status or headers, or of
    one that asked the client a question (it will depend on the reply); None otherwise."""
    if refused is not None:
        return follower_share(status, Verdict(refused), False, False)
    if capture.asked_client:
        return "alone"
    return None


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


def filing(server: Server, lookup: Lookup, verdict: Verdict, headers: Mapping[str, str]) -> Filing:
    """The caller's own key, or, under `trustPublicHints`, the key for every caller when
    the server marks the result `public` and nothing in the answer says it depends on
    who asked: no cookie, no `Vary` on an identity header or the session. The sidecar
    never makes a result public that the server did not mark so; and the mark is the
    result's, not the notifications the stream carried before it (a log line may name
    who asked): an answer with notifications to replay stays its caller's."""
    if not verdict.notes and _marked_public(server, lookup, verdict.scope, headers):
        return Filing(lookup.public_key, lookup.scope._replace(public=True), "")
    return Filing(lookup.key, lookup.scope, lookup.session)


def for_everyone(
    server: Server, lookup: Lookup, scope: CacheScope | None, headers: Mapping[str, str]
) -> bool:
    """Whether a storable answer whose result says `scope` is kept for every caller:
    under a `scope: public` rule, or as `filing` files it."""
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
    return vary is None or varies_within_key(anyone, vary)
