"""The RFC 9211 `Cache-Status` values the sidecar sends, in one grammar.

`mcpcache; hit` for an answer from the cache (`hit; detail=shared` from the shared
tier on Redis, `detail=public` from an entry for every caller, `detail=shared-public`
both); otherwise `mcpcache; fwd=<why forwarded>`
with `stored` when the answer was kept, `collapsed` when another identical request's
upstream call answered it, and a `detail` naming why it was not stored. Stale answers
say why in their `detail`: `hit; detail=stale-while-revalidate` (answered from the
cache while it is asked again in the background), or `fwd=stale; fwd-status=<code>;
detail=stale-if-error` (the upstream was asked and failed; `fwd-status` only when it
answered with an HTTP status at all); from an entry for every caller, the detail says
so first (`detail=public-stale-if-error`).

The reasons themselves are named here, once, for every part that gives or counts them:
`BypassReason` (why a request is never looked up), `NotStoredReason` (why an answer is
not kept) and `Doubt` (why a message is not read with certainty).
"""

from __future__ import annotations

from typing import Final, Literal

HIT: Final = "mcpcache; hit"

SHARED_HIT: Final = "mcpcache; hit; detail=shared"
"""Answered from the shared tier (Redis), not from this sidecar's memory."""

PUBLIC_HIT: Final = "mcpcache; hit; detail=public"
"""Answered from an entry for every caller of the server (`scope: public`, or a result
the server marked public under `trustPublicHints`), not from the caller's own."""

SHARED_PUBLIC_HIT: Final = "mcpcache; hit; detail=shared-public"
"""Both: an entry for every caller, read from the shared tier."""

BypassReason = Literal[
    "method",
    "disabled",
    "request_state",
    "task",
    "unreadable",
    "batch",
    "ambiguous_name",
    "ambiguous_headers",
    "accept",
    "too_deep",
    "positional_params",
    "tool_rule",
    "declared_writer",
    "not_read_only",
    "skip_if",
]

NotStoredReason = Literal[
    "error",
    "tool_error",
    "input_required",
    "task",
    "no_cache",
    "vary",
    "set_cookie",
    "inexact_number",
    "id_reused",
    "server_request",
    "too_large",
    "too_deep",
    "no_store",
    "ttl_zero",
    "upstream_status",
    "incomplete",
    "over_budget",
    "invalidated",
    "private_result",
    "stream_not_replayable",
]

Doubt = Literal["unreadable", "batch", "ambiguous_name", "too_deep", "positional_params", "accept"]
"""Why a message cannot be read with certainty (see `read_message`)."""


def forwarded(
    fwd: str,
    detail: str | None = None,
    stored: bool = False,
    collapsed: bool = False,
    fwd_status: int | None = None,
) -> str:
    value = f"mcpcache; fwd={fwd}"
    if fwd_status is not None:
        value += f"; fwd-status={fwd_status}"
    if stored:
        value += "; stored"
    if collapsed:
        value += "; collapsed"
    if detail:
        value += f"; detail={detail}"
    return value


def detail(reason: str) -> str:
    """A not-stored reason as a `detail` token (`too_large` → `too-large`)."""
    return reason.replace("_", "-")


def of_public_entry(status: str) -> str:
    """`status` for a stale answer from an entry for every caller."""
    return status.replace("; detail=", "; detail=public-", 1)


def stale_if_error(fwd_status: int | None) -> str:
    return forwarded("stale", "stale-if-error", fwd_status=fwd_status)


MISS: Final = forwarded("miss")

MISS_STORED: Final = forwarded("miss", stored=True)

STALE_WHILE_REVALIDATE: Final = f"{HIT}; detail=stale-while-revalidate"


def of_miss(reason: str | None) -> str:
    """`Cache-Status` of a miss whose answer was judged: stored, or why not."""
    if reason is None:
        return MISS_STORED
    return forwarded("miss", detail(reason))


BYPASS_FWD: Final[dict[BypassReason, str]] = {
    "method": "method",  # the cache does not handle this method
    "disabled": "bypass",  # the server's cache is off
    "request_state": "request",  # the request itself rules the cache out
    "task": "request",  # the caller asked for a task: the work must run
    "unreadable": "request",  # not one JSON-RPC message the sidecar reads with certainty
    "batch": "request",  # a JSON-RPC batch: forwarded whole
    "ambiguous_name": "request",  # a name the sidecar reads given twice (case aside)
    "ambiguous_headers": "request",  # a credential or the session sent twice, or hidden
    "accept": "request",  # the client does not take both JSON and an event stream
    "too_deep": "request",  # nested deeper than the key can be written
    "positional_params": "request",  # params as an array: the key reads objects only
    "tool_rule": "bypass",  # the tool's rule turns caching off (or the tool writes)
    "declared_writer": "bypass",  # the server marks the tool as one that changes things
    "not_read_only": "bypass",  # onlyReadOnlyTools, and the tool is not known read-only
    "skip_if": "bypass",  # an argument value the tool's skipIf names
}
"""RFC 9211 `fwd` values for requests never looked up."""

BYPASS_DETAIL: Final[dict[BypassReason, str]] = {
    "unreadable": "unreadable",
    "batch": "batch",
    "ambiguous_name": "ambiguous-name",
    "ambiguous_headers": "ambiguous-headers",
    "accept": "accept",
    "tool_rule": "tool-rule",
    "declared_writer": "declared-writer",
    "not_read_only": "not-read-only",
    "positional_params": "positional-params",
    "too_deep": "too-deep",
    "skip_if": "skip-if",
}
"""`detail` values that tell apart bypasses sharing one `fwd`."""
