"""Reading a request body with certainty: the value the key and the rules see, never
the bytes the upstream receives.

The body goes upstream exactly as the client sent it, so the sidecar's reading must
never make two bodies one that an upstream could read apart. JSON leaves that room in
three places: a name given twice in one object (RFC 8259 leaves the choice to the
reader: orjson keeps the last value, other parsers the first), the spelling of numbers
(`1.0`, `1.00` and `1e0` are one double, not one decimal), and values past what a parser
holds (`1e400`, a 30-digit integer, `NaN`).

The fast path: orjson reads the body, and when writing the value again gives back the
very same bytes, the body is in the one form orjson writes (no name twice, every number
spelt as its value is, no escape read two ways); unless two of its names are equal after
case folding (Go's reader takes them for one), its value is certain. Clients that write
compact JSON (pydantic's `model_dump_json`, `JSON.stringify`) send exactly this.

Any other body is read again by the standard library with hooks that keep what a value
would lose (`read_exactly`): a number not spelt the way orjson writes its value is kept
as its `Spelling`, an object that names a member twice, or two equal after case folding,
as its `Members` (every pair, in order). Both are written into a key as they were sent
(`key_default`), so bodies that differ there never share an entry, and a rule that must
read such a value steps aside.
A body neither reader can read exactly (not UTF-8, `NaN`, a lone surrogate, nesting past
what can be written again) is `Unreadable`: it goes upstream uncached.

Pure, no I/O.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final, Literal

import orjson

LARGE_BODY: Final = 64 * 1024
"""Bodies past this size are read off the event loop."""
WRITE_DEPTH: Final = 254
"""The deepest nesting orjson writes (it reads four times deeper)."""
_INTEGER_DIGITS: Final = 19
"""Integer literals up to this many characters (a sign included) are read as integers;
longer ones are kept by their spelling, whatever their value (orjson writes 64 bits)."""
_INT64_MIN, _UINT64_END = -(1 << 63), 1 << 64

UnreadableReason = Literal["unreadable", "too_deep"]


class Unreadable(ValueError):
    """The body cannot be read with certainty; `reason` says which kind of doubt."""

    def __init__(self, reason: UnreadableReason, message: str) -> None:
        super().__init__(message)
        self.reason: UnreadableReason = reason


class Spelling:
    """A number whose parsed value would not keep how it was written (`1.00`, `1e2`,
    `-0`, `18446744073709551617`): compared and keyed by its text."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Spelling) and other.text == self.text

    def __hash__(self) -> int:
        return hash(("spelling", self.text))

    def __repr__(self) -> str:
        return f"Spelling({self.text!r})"


class Members:
    """An object that names a member more than once, or holds two names equal after
    case folding (one member to Go's reader, the last one winning): its pairs as
    written, in order.

    Which of two values an upstream uses is up to its parser; whoever reads such an
    object must either keep every pair in order (the key) or step aside (a rule)."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Members) and other.pairs == self.pairs

    def __hash__(self) -> int:  # pragma: no cover - never a dict key
        return hash(len(self.pairs))

    def names(self) -> list[str]:
        return [name for name, _ in self.pairs]

    def __repr__(self) -> str:
        return f"Members({self.pairs!r})"


def key_default(value: Any) -> orjson.Fragment:
    """orjson's `default` for what `read_exactly` keeps: a `Spelling` as its text, a
    `Members` as an object with every pair in the order sent (parsers differ in which of
    two values they keep). No other value writes as an object with a repeated name, so
    neither ever meets a plain one."""
    if isinstance(value, Spelling):
        return orjson.Fragment(value.text.encode())
    if isinstance(value, Members):
        parts = [
            orjson.dumps(name) + b":" + orjson.dumps(item, default=key_default)
            for name, item in value.pairs
        ]
        return orjson.Fragment(b"{" + b",".join(parts) + b"}")
    raise TypeError(f"{type(value).__name__} is not JSON")


def read(raw: bytes) -> Any:
    """The body's value, certain as the module says; raises `Unreadable`."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return read_exactly(raw)
    try:
        if orjson.dumps(value) == raw and not _may_fold_twice(raw, value):
            return value
    except orjson.JSONEncodeError:
        pass  # nested deeper than orjson writes
    return read_exactly(raw)


SDK_NAME_ENDS: Final = tuple(
    (f'{name.lower()}":'.encode(), f'{name}":'.encode())
    for name in ("protocolVersion", "clientCapabilities", "progressToken")
)
"""The ends of the cased names an MCP SDK client writes in `_meta` on every call
(`io.modelcontextprotocol/protocolVersion`, `…/clientCapabilities`, `progressToken`),
lowered and as written. None holds a quote or a backslash, and none lowered ends another
lowered: `_may_fold_twice` leans on both."""


def _may_fold_twice(raw: bytes, value: Any) -> bool:
    """Whether one object of `value` (parsed from `raw`, which orjson writes back as it
    is) holds two names equal after case folding.

    An ASCII body is lowered whole. When writing the SDK's cased names back into the
    lowered body (`SDK_NAME_ENDS`, each where a name ends: before `":`) gives `raw`
    again, every capital of `raw` sits at the end of a name ending so (a quote ends a
    name there, and the ends hold no quote or backslash), and no name of `raw` ends in
    one of them lowered (it would have been written back cased): two names equal once
    lowered would then both end in one cased end, or one in each, which the ends rule
    out, and differ only before it, where neither has a capital. That costs a lowering
    and three replacements, where the general check below parses the lowered body
    again (on an SDK client's `tools/call`, 7.8 thousand instructions against 15.9).

    Otherwise two names of one object that fold together become one name given twice
    in the lowered body, which orjson keeps once, so the lowered body no longer writes
    back as it is (values change case too, which changes nothing of that). A body past
    ASCII is walked, object by object (`str.casefold` also folds the long s and the
    Kelvin sign, as Go does). All are linear in the body."""
    if raw.isascii():
        lowered = raw.lower()
        if lowered == raw:
            return False
        restored = lowered
        for end, cased in SDK_NAME_ENDS:
            restored = restored.replace(end, cased)
        if restored == raw:
            return False
        try:
            return orjson.dumps(orjson.loads(lowered)) != lowered
        except (orjson.JSONDecodeError, orjson.JSONEncodeError):
            return True  # read exactly to find out
    stack = [value]
    push = stack.append
    while stack:
        item = stack.pop()
        if type(item) is dict:
            if len(item) > 1 and len({name.casefold() for name in item}) != len(item):
                return True
            item = item.values()
        elif type(item) is not list:
            continue
        for each in item:
            if type(each) is dict or type(each) is list:
                push(each)
    return False


def read_exactly(raw: bytes) -> Any:
    """The body's value with every spelling and every repeated name kept; raises
    `Unreadable`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable("unreadable", "the body is not UTF-8") from None
    try:
        value = json.loads(
            text,
            object_pairs_hook=_object,
            parse_float=_float,
            parse_int=_integer,
            parse_constant=_constant,
        )
    except RecursionError:
        raise Unreadable("too_deep", "the body is nested too deeply to read") from None
    except ValueError as exc:
        raise Unreadable("unreadable", f"the body is not JSON: {exc}") from None
    try:
        orjson.dumps(value, default=key_default)
    except (orjson.JSONEncodeError, RecursionError):
        if raw.count(b"[") + raw.count(b"{") > WRITE_DEPTH:
            why = "the body is nested deeper than keys are written"
            raise Unreadable("too_deep", why) from None
        raise Unreadable("unreadable", "the body holds a string that is not Unicode") from None
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any] | Members:
    value = dict(pairs)
    if len(value) != len(pairs) or folded_twice(list(value)) is not None:
        return Members(pairs)
    return value


def _float(text: str) -> float | Spelling:
    value = float(text)
    if math.isfinite(value) and orjson.dumps(value) == text.encode():
        return value
    return Spelling(text)


def _integer(text: str) -> int | Spelling:
    if len(text) <= _INTEGER_DIGITS:
        value = int(text)
        if _INT64_MIN <= value < _UINT64_END and str(value) == text:
            return value
    return Spelling(text)


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def folded_twice(names: list[str]) -> str | None:
    """A name of `names` that another one equals after case folding (or exactly), or
    None. Go's `encoding/json` matches names without regard to case (folding U+017F to
    `s` and the Kelvin sign to `k` too): `Name` beside `name` is a second `name` to it."""
    if len(names) < 2:
        return None
    seen: set[str] = set()
    for name in names:
        folded = name.casefold()
        if folded in seen:
            return name
        seen.add(folded)
    return None


def names_of(value: Any) -> list[str]:
    """The member names of an object as written (every copy of a repeated one)."""
    if isinstance(value, Members):
        return value.names()
    if isinstance(value, dict):
        return list(value)
    return []
