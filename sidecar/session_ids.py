"""JSON-RPC ids in flight inside each legacy session.

A session's server routes each response to the request with that id; when one session
carries two requests with the same id at once (two users of one shared session, say),
the server may hand one request's answer to the other. Neither answer may then be
stored: it could be stored under the other request's key, for another user to read.
"""

from __future__ import annotations

import math
from typing import Any


def id_name(request_id: Any) -> str:
    """One name for every spelling a server may take for the same id.

    Servers differ in how they tell ids apart: some compare them as text (`7` and `"7"`
    are one id), the TypeScript SDK by numeric value (`1`, `1.0` and `1e0` are one id, and
    so are two integers a double cannot tell apart). The name is the loosest of these
    readings, so that any two ids some server could confuse share it: a number, or text
    that reads as one, is named by its value as a double."""
    number: float | None = None
    if isinstance(request_id, int | float) and not isinstance(request_id, bool):
        number = _as_double(request_id)
    elif isinstance(request_id, str):
        try:
            number = float(request_id.strip())
        except ValueError:
            number = None
    if number is None or not math.isfinite(number):
        return str(request_id)
    if number == 0:
        return "0"  # -0.0 and 0 are one value
    return repr(number)


def _as_double(value: int | float) -> float | None:
    try:
        return float(value)
    except OverflowError:  # an integer past a double's range: no server reads it as one
        return None


class Ticket:
    """One request's place in its session; `reused` once another took the same id."""

    __slots__ = ("name", "reused")

    def __init__(self, name: tuple[str, str]) -> None:
        self.name = name
        self.reused = False


class SessionRequestIds:
    def __init__(self) -> None:
        self._open: dict[tuple[str, str], list[Ticket]] = {}

    def begin(self, session_scope: str, request_id: Any) -> Ticket:
        ticket = Ticket((session_scope, id_name(request_id)))
        same = self._open.setdefault(ticket.name, [])
        same.append(ticket)
        if len(same) > 1:
            for each in same:
                each.reused = True
        return ticket

    def end(self, ticket: Ticket) -> None:
        same = self._open.get(ticket.name)
        if same is None or ticket not in same:
            return
        same.remove(ticket)
        if not same:
            del self._open[ticket.name]

    def __len__(self) -> int:
        return sum(len(same) for same in self._open.values())
