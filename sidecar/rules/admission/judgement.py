"""Admission of answers: the one judgement of what an upstream's answer allows.

The I/O layers report facts (`Answer`: the status, the headers, what the capture saw of
the body, whether the id was reused in its session, whether entries were dropped or the
session ended while it was upstream); `judge` turns them into a `Judgement`: stored or
not and why, for how long, under which key and scope, what identical requests waiting
on it receive, whether it teaches the policy, and the result as it leaves when the
operator's freshness rewrites its hint. Every not-stored reason comes from `judge`,
through the rules beside it (`response_headers`, `sharing`, `freshness`). A forwarded
answer (not cacheable) is judged by `judge_forwarded`: whether a write happened and
whether a listing teaches. Pure, no I/O; like `policy`, which decides the request side.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

import orjson

from ...config import Server
from ..cache_status import NotStoredReason
from ..invalidation.writes import write_happened
from ..policy.plan import Bypass, Lookup
from ..protocol.notifications import replayable
from ..protocol.results import Verdict, cache_scope, judge_response, not_an_answer
from ..reading.numbers import has_inexact_number
from . import freshness
from .capture import ResponseCapture
from .response_headers import response_refusal, storage_ttl
from .sharing import Filing, FollowerShare, filing, follower_share, for_everyone, scoped

WRITE_DEPTH: Final = 254
"""The deepest nesting orjson writes (it reads four times deeper). An answer whose
`result` or `error` is nested deeper reaches its client as it came, but it can be neither
stored, nor framed for another request, nor digested, nor learned from: each writes it."""


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
    """The call's own answer (`results.not_an_answer`) to a request nothing overtook."""
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
    # A storable verdict read the result already: it is the call's own answer.
    served = current and (
        verdict.reason is None
        or not_an_answer(final.get("result") if final is not None else None) is None
    )
    teaches = lookup.learner is not None and current and final is not None and "result" in final
    rewrite = final is not None and freshness.overrides(server, method, final)
    if rewrite and final is not None:
        everyone = for_everyone(server, lookup, cache_scope(final["result"]), headers)
        verdict = freshness.storable(verdict, final, everyone)
    verdict = scoped(lookup, verdict, headers)
    if verdict.reason is None and (capture.notes or capture.unreplayable):
        verdict = with_notes(verdict, capture)
    ttl = storage_ttl(server, verdict, headers, method, lookup.ttl)
    if verdict.reason is None and answer.session_ended:
        verdict = Verdict("invalidated")  # its session ended while it was upstream
    if verdict.reason is None and (ttl <= 0 or verdict.size > budget):
        verdict = Verdict("over_budget")
    leaves = freshness.restated(verdict, ttl) if rewrite and verdict.reason is None else None
    public = lookup.scope.public
    share = follower_share(status, verdict, capture.final_seen, final is not None, public)
    if share == "answer" and verdict.reason is not None and (capture.notes or capture.unreplayable):
        share = "alone"  # its notifications are not kept: each fetches its own stream
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
            return judge_response(capture.final)  # writes what it stores, whole
        except orjson.JSONEncodeError:
            return Verdict("too_deep")
    if capture.broken:
        return Verdict("incomplete")
    if capture.too_large and (capture.ended or not capture.event_stream):
        return Verdict("too_large")  # a JSON body past the bound is never read
    if capture.ended:
        return Verdict("incomplete")
    return None


def with_notes(verdict: Verdict, capture: ResponseCapture) -> Verdict:
    """A storable answer with the notifications its stream carried before it, as a hit
    replays them; not stored when one of them cannot be replayed faithfully."""
    notes = None if capture.unreplayable else replayable(capture.notes, capture.progress_token)
    if notes is None:
        return Verdict("stream_not_replayable")
    return dataclasses.replace(verdict, notes=notes)


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


class Forwarded(NamedTuple):
    """What a forwarded (uncached) request's answer did: `wrote` (what its plan
    invalidates goes), `teaches` (a listing the policy learns from)."""

    wrote: bool
    teaches: bool


def judge_forwarded(
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
