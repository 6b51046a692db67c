"""Admission of answers: the one judgement of what an upstream's answer allows.

The I/O layers report facts (`Answer`: the status, the headers, what the capture saw of
the body, whether the id was reused in its session, whether entries were dropped or the
session ended while it was upstream); `judge` turns them into a `Judgement`: stored or
not and why, for how long, under which key and scope, what identical requests waiting
on it receive, whether it teaches the policy, and the result as it leaves when the
operator's freshness rewrites its hint. Every not-stored reason comes from here. A
forwarded answer (not cacheable) is judged by `forwarded`: whether a write happened and
whether a listing teaches. Pure, no I/O; like `policy`, which decides the request side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, NamedTuple

import orjson

from ..cache.store import Scope
from ..config import Server
from . import freshness
from .callers import ROUTING_HEADERS, public_keyed
from .capture import ResponseCapture
from .headers import cache_directives
from .messages import (
    METADATA_METHODS,
    CacheScope,
    NotStoredReason,
    Verdict,
    cache_scope,
    judge_response,
)
from .numbers import has_inexact_number
from .policy import Bypass, Lookup

FAILED_CALL: Final[frozenset[NotStoredReason | None]] = frozenset(
    {"error", "tool_error", "input_required"}
)
"""Answers to a write that show it did not happen; any other end may have written."""

_KEYED_BY_BODY: Final = ROUTING_HEADERS | {"accept", "accept-encoding"}
"""Headers a `Vary` may name without making an answer unstorable: the routing headers
must equal the body (checked before lookup), and every answer has one media type."""

WRITE_DEPTH: Final = 254
"""The deepest nesting orjson writes (it reads four times deeper). An answer whose
`result` or `error` is nested deeper reaches its client as it came, but it can be neither
stored, nor framed for another request, nor digested, nor learned from: each writes it."""

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


class Answer(NamedTuple):
    """What the I/O layers saw of one upstream answer to a cacheable request."""

    status: int
    headers: Mapping[str, str]
    capture: ResponseCapture
    id_reused: bool = False
    """Another request used its id in its legacy session meanwhile."""
    overtaken: bool = False
    """Entries of its server were dropped while it was upstream."""
    session_ended: bool = False
    """Its legacy session, whose entries end with it, ended while it was upstream."""


class Filing(NamedTuple):
    """Where a storable answer is kept: its key, scope and legacy session."""

    key: str
    scope: Scope
    session: str


class Judgement(NamedTuple):
    """What an answer allows. Stored when `verdict.reason` is None: `verdict.result`
    for `ttl` seconds, as `filing` says."""

    verdict: Verdict
    ttl: float
    filing: Filing
    share: FollowerShare
    """What identical requests waiting on it receive."""
    final: dict[str, Any] | None
    """The final answer as others may read it (followers, hints, observations): None
    when it was too large to keep, or cannot be written again."""
    leaves: bytes | None
    """The result as it leaves, when the operator's freshness rewrote its hint."""
    served: bool
    """A result (not an error, not `isError`) to a request nothing overtook."""
    teaches: bool
    """A listing whose result teaches the policy the server's tools."""


def judge(
    server: Server, lookup: Lookup, method: str | None, answer: Answer, budget: int
) -> Judgement:
    """The judgement of a cacheable request's answer, once its final response passed or
    its body ended; `budget`: the most bytes the memory tier holds."""
    capture, headers, status = answer.capture, answer.headers, answer.status
    refused = response_refusal(server, lookup, status, headers, capture.event_stream)
    verdict = answer_verdict(capture, refused) or Verdict("incomplete")
    if answer.id_reused:
        # Whatever it says, the answer may be another request's: neither kept nor
        # handed to followers (an error or an uncached result included).
        verdict = Verdict("id_reused")
    elif verdict.reason is None and answer.overtaken:
        verdict = Verdict("invalidated")  # fetched before entries were dropped
    final = shareable_final(capture, verdict)
    # A listing answered for another request, or overtaken by a change the server
    # announced while it was upstream, teaches nothing.
    current = verdict.reason not in ("id_reused", "invalidated")
    result = final.get("result") if final is not None else None
    served = current and isinstance(result, dict) and result.get("isError") is not True
    teaches = lookup.learner is not None and current and final is not None and "result" in final
    rewrite = final is not None and freshness.overrides(server, method, final)
    if rewrite and final is not None:
        everyone = for_everyone(server, lookup, cache_scope(final["result"]), headers)
        verdict = freshness.storable(verdict, final, everyone)
    verdict = scoped(lookup, verdict, headers)
    ttl = storage_ttl(server, verdict, headers, method, lookup.ttl)
    if verdict.reason is None and answer.session_ended:
        verdict = Verdict("invalidated")  # its session ended while it was upstream
    if verdict.reason is None and (ttl <= 0 or len(verdict.result) > budget):
        verdict = Verdict("over_budget")
    leaves = freshness.restated(verdict, ttl) if rewrite and verdict.reason is None else None
    public = lookup.scope.public
    share = follower_share(status, verdict, capture.final_seen, final is not None, public)
    return Judgement(
        verdict, ttl, filing(server, lookup, verdict, headers), share, final, leaves, served,
        teaches,
    )  # fmt: skip


def answer_verdict(
    capture: ResponseCapture, refused: NotStoredReason | None = None
) -> Verdict | None:
    """What the body the capture saw allows, or None while that is not known yet (no
    final answer, the body still coming). `refused`: a reason known from the status or
    headers, which wins: such an answer is followed, never kept."""
    if refused is not None:
        return Verdict(refused)
    if capture.final_seen:
        if capture.asked_before_final:
            return Verdict("server_request")
        if capture.final_over_size or capture.final is None:
            return Verdict("too_large")
        raw = capture.final_raw
        if has_inexact_number(raw, capture.final):
            return Verdict("inexact_number")  # a hit would not repeat its numbers exactly
        try:
            return judge_response(capture.final)  # writes what it stores
        except orjson.JSONEncodeError:
            return Verdict("too_deep")
    if capture.broken:
        return Verdict("incomplete")
    if capture.too_large and (capture.ended or not capture.event_stream):
        return Verdict("too_large")  # a JSON body past the bound is never read
    if capture.ended:
        return Verdict("incomplete")
    return None


def shareable_final(capture: ResponseCapture, verdict: Verdict) -> dict[str, Any] | None:
    """The final answer as others may read it. Not stored, it may still be shared,
    digested or learned from, and each of those writes it: one nested too deep to write
    again goes to nobody but the client it streams to."""
    final = capture.final
    if final is not None and verdict.reason is not None and too_deep(final, capture.final_raw):
        return None
    return final


def too_deep(message: dict[str, Any], raw: bytes) -> bool:
    """Whether orjson cannot write the `result` or `error` of `message` (parsed from
    `raw`) again. Both sit a level inside the message, so an answer with no more brackets
    than `WRITE_DEPTH + 1` never is; only one with more is written to find out."""
    if raw.count(b"[") + raw.count(b"{") <= WRITE_DEPTH + 1:
        return False
    try:
        orjson.dumps(message.get("result"))
        orjson.dumps(message.get("error"))
    except orjson.JSONEncodeError:
        return True
    return False


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
    return vary is None or _varies_within_key(anyone, vary)


class Forwarded(NamedTuple):
    """What a forwarded (uncached) request's answer did: `wrote` (what its plan
    invalidates goes), `teaches` (a listing the policy learns from)."""

    wrote: bool
    teaches: bool


def forwarded(
    plan: Bypass,
    status: int,
    verdict: Verdict,
    final: dict[str, Any] | None,
    unread: bool,
    current: bool,
) -> Forwarded:
    """The judgement of a forwarded request's answer. `unread`: its body was read as no
    message; `current`: no other request used its id meanwhile and nothing overtook it."""
    if plan.invalidates:
        # A 202 answers a body of notifications and responses only: nothing it held
        # was a request, so nothing it held wrote.
        accepted_only = unread and status == 202
        return Forwarded(not accepted_only and write_happened(verdict, status), False)
    teaches = plan.learner is not None and current and final is not None and "result" in final
    return Forwarded(False, teaches)


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
