"""Rules on argument values: `skipIf` (values that send a call upstream uncached), the
argument values an entry is filed under for writes that `match` on them, and the
schema's defaults filled into a call's arguments. Pure functions.

Values are compared as `config.value_text` reads them: as every lax validator might
(numbers by value, booleans with their spellings, strings in NFC, case aside), so that
both rules err towards the upstream's answer of now — a value that may be the same one
skips the cache, or drops the entry. A value that no reading settles (`reading`'s kept
spellings, names given twice) steps aside: `skipIf` skips, a write drops wide.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final, NamedTuple

import orjson

from ..config import ArgumentMatch, ToolRule, number_text, value_text
from .key import secret_digest
from .reading import Members, Spelling

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


def arguments_of(params: Mapping[str, Any]) -> Mapping[str, Any]:
    arguments = params.get("arguments")
    return arguments if isinstance(arguments, dict) else _NONE


_NONE: Final[Mapping[str, Any]] = {}


def doubtful(arguments: Any, names: Collection[str]) -> bool:
    """Whether the upstream may read one of `names` in `arguments` otherwise than the
    sidecar: the object names a member twice (which copy counts is the parser's), or
    holds a name equal to one of `names` after case folding (Go's reading)."""
    if not names:
        return False
    folded = {name.casefold(): name for name in names}
    if isinstance(arguments, Members):  # unread to the rules: doubt where they would read
        return any(name.casefold() in folded for name in arguments.names())
    if not isinstance(arguments, dict):
        return False
    for name in arguments:
        read = folded.get(name.casefold())
        if read is not None and read != name:
            return True
    return False


def _compared(value: Any) -> str | None:
    """`value_text` of an argument, a kept spelling read as the number it spells."""
    if isinstance(value, Spelling):
        return number_text(value.text)
    return value_text(value)


def skipped(rule: ToolRule, arguments: Mapping[str, Any]) -> bool:
    """Whether one of `rule`'s `skipIf` values is among the call's arguments; a number
    spelt so that no reading settles it counts as one (the call steps aside)."""
    for name, texts in rule.skip_texts.items():
        if name in arguments:
            value = arguments[name]
            text = _compared(value)
            if text in texts or (text is None and isinstance(value, Spelling)):
                return True
    return False


def _value_digest(name: str, value: Any) -> str:
    """The value's digest; "" (unknown) for one that cannot be settled here (nested
    deeper than JSON can be written, a number no reading settles, an object that names
    a member twice, or one holding such a number): a write with it removes every entry
    of the tool, and an entry filed with it is removed by every write of its tool."""
    text = _compared(value)
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


def with_defaults(params: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """`params` with each omitted top-level argument that has a known default set to it
    (for the key only: the upstream receives the call as it was sent)."""
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return params
    missing = {name: value for name, value in defaults.items() if name not in arguments}
    if not missing:
        return params
    return {**params, "arguments": {**missing, **arguments}}
