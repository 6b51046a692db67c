"""JSON-RPC ids in flight inside each legacy session.

A session's server routes each response to the request with that id; when one session
carries two requests with the same id at once (two users of one shared session, say),
the server may hand one request's answer to the other. Neither answer may then be
stored: it could be stored under the other request's key, for another user to read.

An id stays taken until the server is known to be done with it — its answer has passed —
not merely until the sidecar stops relaying: a request the sidecar gave up on (a
timeout, a client that left, a broken body) may still be running upstream, and its
answer would go to the next request with that id. Such an id stays taken for
`ABANDONED_SECONDS` (or until its session ends), at most `ABANDONED_KEPT` of them.

A body the sidecar could not read (a batch, an id given twice) holds `ANY_ID`: while it
is in flight, or abandoned, every id of its session counts as reused.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Final

import cachetools

from ..reading.body import Spelling

ABANDONED_SECONDS: Final = 600.0
ABANDONED_KEPT: Final = 4096
ANY_ID: Final = object()
"""The id of a body the sidecar could not read: any of its session's."""
_ANY_NAME: Final = "\0any"
"""Its name (an id spelt so by a client is taken for one, which errs towards reuse)."""


def id_name(request_id: Any) -> str:
    """One name for every spelling a server may take for the same id.

    Servers differ in how they tell ids apart: some compare them as text (`7` and `"7"`
    are one id), the TypeScript SDK by numeric value (`1`, `1.0` and `1e0` are one id, and
    so are two integers a double cannot tell apart). The name is the loosest of these
    readings, so that any two ids some server could confuse share it: a number, or text
    that reads as one, is named by its value as a double."""
    number: float | None = None
    if isinstance(request_id, Spelling):
        request_id = request_id.text.strip()  # read as the number it spells, below
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
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._open: dict[tuple[str, str], list[Ticket]] = {}
        self._abandoned: cachetools.TTLCache[tuple[str, str], bool] = cachetools.TTLCache(
            ABANDONED_KEPT, ABANDONED_SECONDS, timer=clock
        )
        """Ids whose requests the sidecar gave up on before their answers passed."""

    def begin(self, session_scope: str, request_id: Any) -> Ticket:
        """`request_id`: the id, or `ANY_ID` for a body whose ids are unknown."""
        name = _ANY_NAME if request_id is ANY_ID else id_name(request_id)
        ticket = Ticket((session_scope, name))
        same = self._open.setdefault(ticket.name, [])
        same.append(ticket)
        anywhere = (session_scope, _ANY_NAME)
        if name == _ANY_NAME:
            for key, tickets in self._open.items():
                if key[0] == session_scope:
                    for each in tickets:
                        each.reused = True
        elif len(same) > 1:
            for each in same:
                each.reused = True
        elif ticket.name in self._abandoned or anywhere in self._abandoned:
            ticket.reused = True  # an earlier request with this id may still answer
        elif anywhere in self._open:
            ticket.reused = True  # a body of unknown ids is in flight
        return ticket

    def end(self, ticket: Ticket, answered: bool) -> None:
        """The request is over for the sidecar; `answered`: its answer passed, so the
        server is done with the id (otherwise the id stays taken for a while)."""
        if not answered:
            self._abandoned[ticket.name] = True
        same = self._open.get(ticket.name)
        if same is None or ticket not in same:
            return
        same.remove(ticket)
        if not same:
            del self._open[ticket.name]

    def forget_session(self, session_scope: str) -> None:
        """The session ended: none of its ids can be answered any more."""
        for name in [name for name in self._abandoned if name[0] == session_scope]:
            self._abandoned.pop(name, None)

    def __len__(self) -> int:
        return sum(len(same) for same in self._open.values())
