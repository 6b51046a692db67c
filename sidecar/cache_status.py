"""The RFC 9211 `Cache-Status` values the sidecar sends, in one grammar.

`mcpcache; hit` for an answer from the cache; otherwise `mcpcache; fwd=<why forwarded>`
with `stored` when the answer was kept and a `detail` naming why it was not.
"""

from __future__ import annotations

from typing import Final

HIT: Final = "mcpcache; hit"


def forwarded(fwd: str, detail: str | None = None, stored: bool = False) -> str:
    value = f"mcpcache; fwd={fwd}"
    if stored:
        value += "; stored"
    if detail:
        value += f"; detail={detail}"
    return value


def detail(reason: str) -> str:
    """A not-stored reason as a `detail` token (`too_large` → `too-large`)."""
    return reason.replace("_", "-")


MISS: Final = forwarded("miss")
MISS_STORED: Final = forwarded("miss", stored=True)
