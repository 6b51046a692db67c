"""Tool globs, as removals name the tools whose entries go (`invalidates`, a purge's
`tool`, another replica's message). Pure.

A glob is matched by compiling it (`fnmatch`), which costs about 15 µs a character for
one full of `*`: a name without wildcards is compared instead, and what the globs of
one removal may cost is bounded by their `pattern_length` (`tiers.announcement`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Final

WILDCARDS: Final = frozenset("*?[")


def matches(name: str, glob: str) -> bool:
    """Whether tool `name` matches `glob` (`fnmatch` rules, case-sensitive)."""
    if WILDCARDS.isdisjoint(glob):
        return name == glob
    return fnmatch.fnmatchcase(name, glob)


def pattern_length(globs: Iterable[str]) -> int:
    """The characters of the globs that are compiled to be matched (those with wildcards)."""
    return sum(len(glob) for glob in globs if not WILDCARDS.isdisjoint(glob))
