"""JSON-RPC ids in flight inside each legacy session.

A session's server routes each response to the request with that id; when one session
carries two requests with the same id at once (two users of one shared session, say),
the server may hand one request's answer to the other. Neither answer may then be
stored: it could be stored under the other request's key, for another user to read.
"""

from __future__ import annotations

from typing import Any


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
        # Servers compare ids as text: 7 and "7" are the same request to them.
        ticket = Ticket((session_scope, str(request_id)))
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
