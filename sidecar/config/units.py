"""Parsing of the two value syntaxes the resource borrows from Kubernetes.

Durations follow Go's `time.ParseDuration` (as `metav1.Duration` does): `30s`, `5m`,
`1h30m`, `250ms`. Sizes follow the Kubernetes quantity syntax for bytes: `64Ki`, `1Mi`,
`500k`, `1048576`. Both are parsed here, once, so the operator and the sidecar agree.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_DURATION_UNITS: dict[str, Decimal] = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}
# [0-9], not \d: Python's \d also matches other scripts' digits, which Go refuses.
_DURATION_PART = re.compile(r"([0-9]+(?:[.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h)")
DURATION_PATTERN = r"^(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+$|^0$"
"""The same syntax as a regular expression, as the CRD's validation rules use it."""

_QUANTITY_SUFFIXES: dict[str, int] = {
    "": 1,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
}
_QUANTITY = re.compile(r"^([0-9]+(?:[.][0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
QUANTITY_PATTERN = r"^[0-9]+([.][0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"
"""The same syntax as a regular expression, as the CRD's validation rules use it."""


def parse_duration(text: str) -> float:
    """Return the duration in seconds; raise ValueError on anything Go would refuse."""
    value = text  # no trimming: Go and the API server refuse spaces too
    if value == "0":
        return 0.0
    position = 0
    total = Decimal(0)
    for match in _DURATION_PART.finditer(value):
        if match.start() != position:
            break
        try:
            total += Decimal(match.group(1)) * _DURATION_UNITS[match.group(2)]
        except InvalidOperation as exc:  # pragma: no cover - the pattern admits only numbers
            raise ValueError(f"invalid duration {text!r}") from exc
        position = match.end()
    if position != len(value) or position == 0:
        raise ValueError(f"invalid duration {text!r}: use a number and a unit, e.g. 30s, 5m, 1h30m")
    return float(total)


def parse_quantity(text: str | int) -> int:
    """Return a byte count; raise ValueError on anything that is not a byte quantity."""
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"invalid quantity {text!r}: must not be negative")
        return text
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"invalid quantity {text!r}: use bytes or a suffix, e.g. 64Ki, 1Mi, 500k")
    number, suffix = match.group(1), match.group(2) or ""
    return int(Decimal(number) * _QUANTITY_SUFFIXES[suffix])


def format_duration(seconds: float) -> str:
    """Render seconds in the shortest Go-style form, e.g. `90s` -> `1m30s`."""
    if seconds == 0:
        return "0s"
    if seconds != int(seconds):
        return f"{round(seconds * 1000)}ms"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{secs}s" if secs else "",
    ]
    return "".join(parts)


def format_quantity(size: int) -> str:
    """Render bytes with the largest binary suffix that divides them, e.g. `1048576` -> `1Mi`."""
    for suffix in ("Ti", "Gi", "Mi", "Ki"):
        unit = _QUANTITY_SUFFIXES[suffix]
        if size and size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)
