"""Numbers a parsed message may not keep exactly: such a request is never looked up,
such an answer never stored (two different values would share one entry). Pure."""

from __future__ import annotations

import decimal
import json
import re
from typing import Any, Final

import orjson


def _number_shapes() -> bytes:
    table = bytearray(range(256))
    for char in b"0123456789.":
        table[char] = ord("0")
    table[ord("E")] = ord("e")
    table[ord("+")] = ord("-")
    for char in b"[,":
        table[char] = ord(":")
    for char in b"\t\n\r":
        table[char] = ord(" ")
    return bytes(table)


_NUMBER_SHAPES: Final = _number_shapes()
"""A translation that makes every digit and dot `0`, every exponent mark `e` and every
sign `-`, every `[` and `,` `:` and every JSON whitespace a space, so that the shapes of
numbers a double may not hold are plain substrings."""
_LONG_RUN: Final = re.compile(b"0" * 16)
"""Sixteen digits or dots in a row: more significant digits than a double keeps."""
_LONG_EXPONENT: Final = re.compile(rb"e-?000")
"""A three-digit exponent: past a double's range (`1e400`) or below it (`1e-400`).

Both are searched in the translated bytes as patterns that begin with a literal, which
the regular-expression engine finds many times faster than a character class."""
_SUSPECT: Final = rb" *-?0(?:0{15}|0*e-?000)"
_SUSPECT_NUMBER: Final = re.compile(b":" + _SUSPECT)
_SUSPECT_FIRST: Final = re.compile(_SUSPECT)
"""The same two shapes where a JSON number begins: after `[`, `:` or `,` (all `:` in the
translated bytes) and whitespace (all spaces), or at the start. The translated bytes also
hold these shapes inside strings (`"3e100"`, a hash, an id), which are common in
arguments: only a body with such a number is read again, exactly. The search begins with
a literal too, but tries every `:`: on a crafted body it costs up to about 25 ms per MiB
where the exact reading, in C, may take under 1, so only bodies up to `SUSPECTS_CHECKED`
are searched this way (at most about 1.6 ms each)."""
SUSPECTS_CHECKED: Final = 64 * 1024
_INT64_MIN, _UINT64_END = -(1 << 63), 1 << 64


def has_inexact_number(raw: bytes, parsed: Any = None) -> bool:
    """Whether the body holds a number the parsed message does not keep exactly.

    `parsed`: the body as orjson read it, when the caller has it. A body that orjson
    writes back byte for byte spells every number as its value is (orjson writes the
    shortest text that reads back as the same double, as `repr` does), so it holds none
    such: one write in C, where the searches below take three passes in Python's
    engines (on an 8 KiB answer, about 3 µs against 24).

    Parsed numbers are doubles and 64-bit integers: `0.10000000000000000555` reads as
    `0.1`, `18446744073709551617` as a double and `1e-400` as `0.0`, so two different
    requests would look the same. Such requests are never looked up. The exact re-read
    with `Decimal` only runs when a long run of digits or a long exponent is present: a
    byte translation and two searches look for them anywhere, and in a body of ordinary
    size a third looks for them where a number begins.
    """
    if parsed is not None:
        try:
            if orjson.dumps(parsed) == raw:
                return False
        except orjson.JSONEncodeError:
            pass  # nested deeper than orjson writes: searched as any other body
    shapes = raw.translate(_NUMBER_SHAPES)
    if _LONG_RUN.search(shapes) is None and _LONG_EXPONENT.search(shapes) is None:
        return False
    if (
        len(shapes) <= SUSPECTS_CHECKED
        and _SUSPECT_NUMBER.search(shapes) is None
        and _SUSPECT_FIRST.match(shapes) is None
    ):
        return False
    inexact = False

    def exact_float(text: str) -> float:
        nonlocal inexact
        value = decimal.Decimal(text)
        if not value.is_finite() or decimal.Decimal(repr(float(value))) != value:
            inexact = True
        return 0.0

    def exact_int(text: str) -> int:
        nonlocal inexact
        if not _INT64_MIN <= int(text) < _UINT64_END:
            inexact = True
        return 0

    try:
        json.loads(raw, parse_float=exact_float, parse_int=exact_int)
    except (ValueError, ArithmeticError, RecursionError):  # not read exactly: inexact
        return True
    return inexact
