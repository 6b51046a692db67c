"""Removals: what a write removes (a tool glob's entries, or only those filed with the
values its `match` names), and the digests of argument values an entry is filed under
so that such a write finds it. Values are compared as `reading.arguments.compared`
reads them; one it cannot settle is digested as unknown, and unknown matches every
write of the tool. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

import orjson

from ...config import ArgumentMatch, ToolRule
from ..key.cache_key import secret_digest
from ..reading.arguments import compared
from ..reading.body import Spelling

ArgumentDigests = tuple[tuple[str, str], ...]
"""(argument name, digest of its value) pairs, sorted by name: never the values."""


class MatchedRemoval(NamedTuple):
    """A write's removal of the entries of `tool` (a glob) with these argument values."""

    tool: str
    values: ArgumentDigests


Removal = str | MatchedRemoval
"""What a write removes once it answers: a tool glob's entries, or the matching ones."""

EVERY_ENTRY: Final = "\0every entry"
"""The removal of every entry of the server (no tool glob can be spelt so): a write the
server declared that no rule of the operator's says what it invalidates."""


def _value_digest(name: str, value: Any) -> str:
    """The value's digest; "" (unknown) for one that cannot be settled here (nested
    deeper than JSON can be written, a number no reading settles, an object that names
    a member twice, or one holding such a number): a write with it removes every entry
    of the tool, and an entry filed with it is removed by every write of its tool."""
    text = compared(value)
    if text is None:
        if isinstance(value, Spelling):
            return ""
        try:  # an object or an array: by its canonical JSON
            text = "json:" + orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
        except orjson.JSONEncodeError:
            return ""
    return secret_digest(f"{name}\0{text}")


def argument_digests(names: tuple[str, ...], arguments: Mapping[str, Any]) -> ArgumentDigests:
    """The digests of the named arguments the call has (`names` sorted)."""
    return tuple((n, _value_digest(n, arguments[n])) for n in names if n in arguments)


def removals(rule: ToolRule, arguments: Mapping[str, Any]) -> tuple[Removal, ...]:
    """What a call of this write tool removes: each plain glob as it is, each `{tool,
    match}` entry with the call's values — or, when the call lacks one of the matched
    arguments or its value cannot be digested (unknown here), every entry of that tool."""
    found: list[Removal] = []
    for entry in rule.invalidates:
        if not isinstance(entry, ArgumentMatch):
            found.append(entry)
        elif all(name in arguments for name in entry.match):
            digests = argument_digests(tuple(sorted(entry.match)), arguments)
            known = all(digest for _, digest in digests)
            found.append(MatchedRemoval(entry.tool, digests) if known else entry.tool)
        else:
            found.append(entry.tool)
    return tuple(found)


def recorded_match(recorded: ArgumentDigests, wanted: ArgumentDigests) -> bool:
    """Whether an entry filed with `recorded` may have been called with `wanted`: an
    argument it has no digest of (absent from the call, or not recorded because no rule
    named it when it was stored) counts as a match, so that doubt removes the entry."""
    if not recorded:
        return True
    have = dict(recorded)
    return all(have.get(name, digest) in (digest, "") for name, digest in wanted)
