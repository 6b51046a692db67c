"""Per-tool rules: which tools are cached, for how long, for whom, on which argument
values, and which tools' entries a write removes."""

from __future__ import annotations

import fnmatch
import functools
import math
import unicodedata
from typing import Annotated, Any, Final, Literal, Self

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from .fields import MAX_RULE_NAMES, MAX_TTL_SECONDS, Duration, Glob, Model

MAX_MATCHED_ARGUMENTS = 8
"""Arguments one `invalidates` entry may match on."""
MAX_SKIP_ARGUMENTS = 16
MAX_SKIP_VALUES = 32
MAX_SKIP_VALUE_LENGTH = 256


def _distinct(values: tuple[Any, ...]) -> tuple[Any, ...]:
    if len(set(values)) != len(values):
        raise ValueError("must not name the same value twice")
    return values


Names = Annotated[tuple[Glob, ...], Field(max_length=MAX_RULE_NAMES), AfterValidator(_distinct)]
ArgumentNames = Annotated[
    tuple[Glob, ...],
    Field(min_length=1, max_length=MAX_MATCHED_ARGUMENTS),
    AfterValidator(_distinct),
]


def is_catch_all(glob: str) -> bool:
    """A pattern every tool name matches (`*`, `**`, ...)."""
    return set(glob) == {"*"}


def value_text(value: Any) -> str | None:
    """How an argument value compares with another: as any lax validator (pydantic,
    FastMCP, zod's coercions) may read it, so that values one of them reads as the
    same compare equal. None for objects and arrays, which compare only by their
    canonical JSON.

    - numbers by value, whatever their spelling or type: `7`, `7.0`, `"7"`, `" 7 "`,
      `"7.00"`, `"7e0"` alike (and `0`, `-0`, `"0.0"`);
    - booleans as numbers, with the spellings lax validators read: `true`, `1`, `"1"`,
      `"true"`, `"True"`, `"yes"`, `"on"`, `"t"`, `"y"` alike, and `false`, `0`,
      `"false"`, `"no"`, `"off"`, `"f"`, `"n"` alike;
    - other strings in Unicode NFC, case aside.

    Loose on purpose: both uses (`skipIf` and `invalidates` with `match`) err on the
    side of the answer the upstream gives now — a value that may be the same skips the
    cache, or drops the entry."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return number_text(repr(value))
    if isinstance(value, str):
        stripped = value.strip().casefold()
        if stripped in _TRUE:
            return "1"
        if stripped in _FALSE:
            return "0"
        number = number_text(stripped)
        if number is not None:
            return number
        return unicodedata.normalize("NFC", unicodedata.normalize("NFC", value).casefold())
    if value is None:
        return "null"
    return None


_TRUE: Final = frozenset({"true", "yes", "on", "t", "y"})
_FALSE: Final = frozenset({"false", "no", "off", "f", "n"})


def number_text(text: str) -> str | None:
    """A number's text by its value as a double, the way Python, pydantic, JavaScript
    and Go read JSON numbers (`7.00`, `7e0` and `7` give `7`; so does
    `7.000000000000000001`, and `1e-400` gives `0`); None for a text that is no number
    a double holds (`1e400` included)."""
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    if value == 0:
        return "0"
    return str(int(value)) if value.is_integer() else repr(value)


SkipValue = bool | int | float | str
"""Read in pydantic's smart mode: each value keeps the JSON type it was written with."""


def _one_or_many(value: Any) -> Any:
    return value if isinstance(value, list | tuple) else [value]


def _short(value: Any) -> Any:
    if isinstance(value, str) and not 0 < len(value) <= MAX_SKIP_VALUE_LENGTH:
        raise ValueError(f"a skipIf value has 1 to {MAX_SKIP_VALUE_LENGTH} characters")
    return value


SkipValues = Annotated[
    tuple[Annotated[SkipValue, AfterValidator(_short)], ...],
    BeforeValidator(_one_or_many),
    Field(min_length=1, max_length=MAX_SKIP_VALUES),
]


class ArgumentMatch(Model):
    """An `invalidates` entry that removes only the entries of `tool` (a glob) whose
    arguments named in `match` have the values the write was called with."""

    tool: Glob
    match: ArgumentNames


Removal = Glob | ArgumentMatch
"""What a write removes: every entry of the tools a glob matches, or only those with
the write's own values of some arguments."""


class ToolRule(Model):
    """How one tool (or a family, by glob) is cached; the first matching rule applies."""

    name: Glob
    enabled: bool | None = Field(default=None, strict=True)
    """Unset: the server's `enabled` (and `onlyReadOnlyTools`) decide."""
    ttl: Duration | None = Field(default=None, gt=0, le=MAX_TTL_SECONDS)
    """Unset: the server's `ttl`."""
    ignore_arguments: Names = ()
    """Top-level arguments left out of the key (request ids, nonces): calls that differ
    only in them share an entry. The caller and the credential always stay in the key."""
    invalidates: Annotated[
        tuple[Removal, ...], Field(max_length=MAX_RULE_NAMES), AfterValidator(_distinct)
    ] = ()
    """What a successful call of this tool removes, for every caller: the entries of the
    tools a glob matches, or (`{tool, match}`) only those with the call's own values of
    the named arguments. Such a tool writes: it is never cached itself."""
    skip_if: Annotated[
        dict[Annotated[str, Field(min_length=1, max_length=128)], SkipValues],
        Field(max_length=MAX_SKIP_ARGUMENTS),
    ] = Field(default_factory=dict)
    """Argument values that send a call upstream uncached (`{version: latest}`, or a list
    of values): answers that are out of date as soon as they are given."""
    scope: Literal["private", "public"] = "private"
    """`public`: one entry answers every caller of the server (the operator's permission
    that the answer depends on the arguments alone); the identity headers and the
    legacy session leave the key."""

    @model_validator(mode="after")
    def _writes_are_not_cached(self) -> Self:
        if self.enabled and self.invalidates:
            raise ValueError(
                "a tool that invalidates others changes state and cannot be cached: "
                "drop enabled: true"
            )
        if (self.enabled is False or self.invalidates) and (self.skip_if or self.scope == "public"):
            raise ValueError(
                "skipIf and scope: public are for cached tools; this rule turns caching off"
            )
        return self

    @functools.cached_property
    def skip_texts(self) -> dict[str, frozenset[str | None]]:
        """`skipIf` as the texts arguments are compared by (`value_text`)."""
        return {name: frozenset(map(value_text, vs)) for name, vs in self.skip_if.items()}

    @property
    def matched_names(self) -> frozenset[str]:
        """The arguments this rule's writes match on."""
        return frozenset(n for r in self.invalidates if not isinstance(r, str) for n in r.match)

    @property
    def invalidated_globs(self) -> tuple[str, ...]:
        """Every tool glob this rule's writes reach, matched on arguments or not."""
        return tuple(r if isinstance(r, str) else r.tool for r in self.invalidates)

    def matches(self, tool: str) -> bool:
        return fnmatch.fnmatchcase(tool, self.name)

    def shadowed_by(self, earlier: ToolRule) -> bool:
        """`earlier` matches every name this rule could match, so this one never applies."""
        if is_catch_all(earlier.name) or earlier.name == self.name:
            return True
        literal = not any(c in self.name for c in "*?[")
        return literal and earlier.matches(self.name)
