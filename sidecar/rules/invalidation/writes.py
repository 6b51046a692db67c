"""Writes: what a call of a write tool removes once it answers, and whether its answer
leaves open that it wrote. A write the sidecar cannot read with certainty removes wide.
Pure.
"""

from __future__ import annotations

from typing import Final

from ...config import Server, ToolRule
from ..cache_status import NotStoredReason
from ..protocol.messages import Message
from ..protocol.results import Verdict
from ..reading.arguments import arguments_of, doubtful
from .removals import Removal, removals


def writes(rule: ToolRule | None, message: Message) -> tuple[Removal, ...]:
    """What a call removes once it answers (nothing unless its tool writes). A write
    whose matched arguments may be read otherwise by the upstream (a name given twice,
    case aside) removes every entry of each tool it invalidates."""
    if rule is None or not rule.invalidates:
        return ()
    if doubtful(message.params.get("arguments"), rule.matched_names):
        return rule.invalidated_globs
    return removals(rule, arguments_of(message.params))


def doubtful_writes(server: Server, message: Message, rule: ToolRule | None) -> tuple[Removal, ...]:
    """What a request the sidecar cannot read with certainty removes once it answers:
    when even its tool may be read otherwise (its method, `params` or the tool's name
    are in doubt), everything any rule of the server invalidates; else what its tool's
    `rule` invalidates, matched on nothing."""
    if message.method == "tools/call" and message.doubt == "accept":  # its tool is certain
        return rule.invalidated_globs if rule is not None else ()
    globs = {glob for rule in server.cache.tools for glob in rule.invalidated_globs}
    return tuple(sorted(globs))


FAILED_CALL: Final[frozenset[NotStoredReason | None]] = frozenset(
    {"error", "tool_error", "input_required"}
)
"""Answers to a write that show it did not happen; any other end may have written."""


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
