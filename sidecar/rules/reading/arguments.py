"""A call's arguments as a rule reads them: the names the upstream may read otherwise
(`doubtful`), and the text a rule compares a value as (`compared`), for `skipIf`
(`policy.arguments`) and for writes that `match` on values (`invalidation.removals`).

Values are compared as `config.value_text` reads them: as every lax validator might
(numbers by value, booleans with their spellings, strings in NFC, case aside), so that
both rules err towards the upstream's answer of now — a value that may be the same one
skips the cache, or drops the entry. A value that no reading settles (`body`'s kept
spellings, names given twice) steps aside: `skipIf` skips, a write drops wide.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from ...config import number_text, value_text
from .body import Members, Spelling


def arguments_of(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """A call's `arguments` as an object (empty when it has none, or another value)."""
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


def compared(value: Any) -> str | None:
    """`value_text` of an argument, a kept spelling read as the number it spells."""
    if isinstance(value, Spelling):
        return number_text(value.text)
    return value_text(value)
