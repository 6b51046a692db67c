"""Per-tool rules: which tools are cached, for how long, for whom, on which argument
values, and which tools' entries a write removes."""

from __future__ import annotations

import fnmatch
import functools
import math
import unicodedata
from typing import Annotated, Any, Final, Literal, Self

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)

from .errors import problems, shown
from .fields import (
    MAX_GLOB_LENGTH,
    MAX_RULE_NAMES,
    MAX_TTL_SECONDS,
    Duration,
    Glob,
    Model,
    SchemaHint,
)

MAX_MATCHED_ARGUMENTS = 8
"""Arguments one `invalidates` entry may match on."""
MAX_SKIP_ARGUMENTS = 16
MAX_SKIP_VALUES = 32
MAX_SKIP_VALUE_LENGTH = 256


def _distinct(values: tuple[Any, ...]) -> tuple[Any, ...]:
    if len(set(values)) != len(values):
        raise ValueError("must not name the same value twice")
    return values


Names = Annotated[
    tuple[Glob, ...],
    Field(max_length=MAX_RULE_NAMES),
    AfterValidator(_distinct),
    SchemaHint(uniqueItems=True),
]
ArgumentNames = Annotated[
    tuple[Glob, ...],
    Field(min_length=1, max_length=MAX_MATCHED_ARGUMENTS),
    AfterValidator(_distinct),
    SchemaHint(uniqueItems=True),
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


def _scalar(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """One skipIf value, with a message that names what is allowed rather than each
    type of the union pydantic tried."""
    if isinstance(value, dict | list | tuple) or value is None:
        raise ValueError(f"{shown(value)} is not allowed: {SKIP_VALUE_RULE}")
    return handler(value)


SKIP_VALUE_RULE: Final = "a skipIf value is a string, number or boolean, or a list of them"
_SKIP_SCALAR = "({})".format(
    " || ".join(f"type(v) == {t}" for t in ("string", "int", "uint", "double", "bool"))
)
_SKIP_TEXT = f"(type(v) != string || (size(v) >= 1 && size(v) <= {MAX_SKIP_VALUE_LENGTH}))"

SkipValues = Annotated[
    tuple[Annotated[SkipValue, WrapValidator(_scalar), AfterValidator(_short)], ...],
    BeforeValidator(_one_or_many),
    Field(min_length=1, max_length=MAX_SKIP_VALUES),
    SchemaHint(
        description="A value (string, number or boolean), or a list of them.",
        **{
            "x-kubernetes-preserve-unknown-fields": True,
            "x-kubernetes-validations": [
                {
                    "rule": f"[self].all(v, {_SKIP_SCALAR}) || (type(self) == list"
                    f" && size(self) >= 1 && size(self) <= {MAX_SKIP_VALUES}"
                    f" && self.all(v, {_SKIP_SCALAR}))",
                    "message": f"{SKIP_VALUE_RULE} (1 to {MAX_SKIP_VALUES})",
                },
                {
                    "rule": f"type(self) == list ? self.all(v, {_SKIP_TEXT})"
                    f" : [self].all(v, {_SKIP_TEXT})",
                    "message": f"a skipIf value has 1 to {MAX_SKIP_VALUE_LENGTH} characters",
                },
            ],
        },
    ),
]


class ArgumentMatch(Model):
    """An invalidates entry that removes only the entries of tool (a glob) whose arguments
    named in match have the values the write was called with."""

    tool: Glob
    """A glob over the tool names whose entries are removed."""
    match: ArgumentNames
    """The arguments (1 to 8) whose values must equal the write's own, compared as text,
    case-insensitively."""


REMOVAL_RULE: Final = "an invalidates entry is a tool glob, or an object {tool, match}"


def _removal(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """One invalidates entry, with the problems of the form it was written in (a glob or
    an object) rather than pydantic's attempt at each member of the union."""
    if isinstance(value, dict):
        try:
            return ArgumentMatch.model_validate(value)
        except ValidationError as exc:
            raise ValueError("; ".join(problems(exc, ArgumentMatch))) from None
    if not isinstance(value, str):
        raise ValueError(f"{shown(value)} is not allowed: {REMOVAL_RULE}")
    try:
        return _GLOB.validate_python(value)
    except ValidationError as exc:
        raise ValueError("; ".join(problems(exc))) from None


_GLOB: Final = TypeAdapter(Glob)


def _is_glob(v: str) -> str:
    """`Glob` in CEL, for where the CRD's schema cannot type it."""
    return f"size({v}) >= 1 && size({v}) <= {MAX_GLOB_LENGTH} && !{v}.matches('[\\\\x00-\\\\x1f]')"


_GLOB_RULE: Final = f"1 to {MAX_GLOB_LENGTH} characters, none of them a control character"
_ONCE = "{0}.all(e, {0}.exists_one(x, x == e))"


Removal = Annotated[
    Glob | ArgumentMatch,
    WrapValidator(_removal),
    SchemaHint(
        description="A tool glob, or an object {tool, match}.",
        **{
            "x-kubernetes-preserve-unknown-fields": True,
            "x-kubernetes-validations": [
                {
                    "rule": "type(self) == string || (type(self) == map"
                    " && self.all(k, k in ['tool', 'match']) && 'tool' in self && 'match' in self)",
                    "message": f"{REMOVAL_RULE} (both fields given)",
                },
                {
                    "rule": f"type(self) != string || ({_is_glob('self')})",
                    "message": f"a tool glob has {_GLOB_RULE}",
                },
                {
                    "rule": "type(self) != map || !('tool' in self) || (type(self.tool) == string"
                    f" && {_is_glob('self.tool')})",
                    "message": f"tool is a glob of {_GLOB_RULE}",
                },
                {
                    "rule": "type(self) != map || !('match' in self) || (type(self.match) == list"
                    f" && size(self.match) >= 1 && size(self.match) <= {MAX_MATCHED_ARGUMENTS}"
                    f" && self.match.all(m, type(m) == string && {_is_glob('m')}))",
                    "message": f"match lists 1 to {MAX_MATCHED_ARGUMENTS} argument names",
                },
                {
                    "rule": "type(self) != map || !('match' in self) || type(self.match) != list"
                    f" || {_ONCE.format('self.match')}",
                    "message": "match must not name the same argument twice",
                },
            ],
        },
    ),
]
"""What a write removes: every entry of the tools a glob matches, or only those with
the write's own values of some arguments."""


WRITES_ARE_NOT_CACHED: Final = (
    "a tool that invalidates others changes state and cannot be cached: drop enabled: true"
)
ONLY_FOR_CACHED_TOOLS: Final = (
    "skipIf and scope: public are for cached tools; this rule turns caching off"
)
_WRITES = "has(self.invalidates) && size(self.invalidates) > 0"
_OFF = f"((has(self.enabled) && !self.enabled) || ({_WRITES}))"
_FOR_CACHED = (
    "((has(self.skipIf) && size(self.skipIf) > 0) || (has(self.scope) && self.scope == 'public'))"
)


class ToolRule(Model):
    """How one tool (or a family, by glob) is cached; the first matching rule applies."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"!(has(self.enabled) && self.enabled && {_WRITES})",
                    "message": WRITES_ARE_NOT_CACHED,
                },
                {"rule": f"!({_OFF} && {_FOR_CACHED})", "message": ONLY_FOR_CACHED_TOOLS},
            ]
        }
    )

    name: Glob
    """A glob over tool names (*, ?, [...]), case-sensitive."""
    enabled: bool | None = Field(default=None, strict=True)
    """Cache the matching tools; when unset, the server's enabled and onlyReadOnlyTools
    decide."""
    ttl: Duration | None = Field(default=None, gt=0, le=MAX_TTL_SECONDS)
    """How long the matching tools' answers are served, as a duration (more than 0s, at
    most 24h); when unset, the server's ttl."""
    ignore_arguments: Names = ()
    """Top-level arguments left out of the cache key (request ids, nonces): calls that
    differ only in them share an entry. The caller and its credentials always stay in the
    key."""
    invalidates: Annotated[
        tuple[Removal, ...],
        Field(max_length=MAX_RULE_NAMES),
        AfterValidator(_distinct),
        SchemaHint(
            **{
                "x-kubernetes-validations": [
                    {
                        "rule": _ONCE.format("self"),
                        "message": "invalidates must not name the same entry twice",
                    }
                ]
            }
        ),
    ] = ()
    """What a successful call of these tools removes, for every caller: a glob of tools
    (all their entries), or {tool, match} (a glob and up to 8 argument names: only the
    entries with the call's own values of those arguments, compared as text,
    case-insensitively). Such tools are never cached."""
    skip_if: Annotated[
        dict[Annotated[str, Field(min_length=1, max_length=128)], SkipValues],
        Field(max_length=MAX_SKIP_ARGUMENTS),
        SchemaHint(
            **{
                "x-kubernetes-validations": [
                    {
                        "rule": "self.all(k, size(k) >= 1 && size(k) <= 128)",
                        "message": "a skipIf argument name has 1 to 128 characters",
                    }
                ]
            }
        ),
    ] = Field(default_factory=dict)
    """Argument values that send a call upstream uncached ({version: latest}, or a list of
    values), compared as text, case-insensitively: answers out of date as soon as they
    are given."""
    scope: Literal["private", "public"] = "private"
    """public lets one entry answer every caller of this server, on your word that the
    answer depends on the arguments alone (the identity headers and the legacy session
    leave the key; the tool, its arguments, the protocol version and every other keyed
    header stay). Default private."""

    @model_validator(mode="after")
    def _writes_are_not_cached(self) -> Self:
        if self.enabled and self.invalidates:
            raise ValueError(WRITES_ARE_NOT_CACHED)
        if (self.enabled is False or self.invalidates) and (self.skip_if or self.scope == "public"):
            raise ValueError(ONLY_FOR_CACHED_TOOLS)
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
