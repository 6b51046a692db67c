"""The legacy sessions that requests pass upstream in.

Inside a legacy session (`Mcp-Session-Id`), each request holds a ticket for its JSON-RPC
id until its answer has passed (see `rules.session_ids`): an answer given while another
request used the same id may be that request's, and is neither stored nor shared. A
session the upstream ended (a DELETE it accepted) or no longer knows (a 404) takes its
entries with it, and is remembered for a while, so that an answer still in flight when
it ended is not stored after its entries were dropped.
"""

from __future__ import annotations

from typing import Any, Final

import cachetools

from ..cache.store import ResponseCache
from ..config import Server
from ..rules.policy import session_scope
from ..rules.session_ids import SessionRequestIds, Ticket

ENDED_SESSIONS_KEPT: Final = 4096
"""How many ended legacy sessions are remembered."""


class LegacySessions:
    def __init__(self, cache: ResponseCache) -> None:
        self.ids = SessionRequestIds()
        self._cache = cache
        self._ended: cachetools.LRUCache[str, bool] = cachetools.LRUCache(ENDED_SESSIONS_KEPT)

    def ticket(self, server: Server, session: str | None, request_id: Any) -> Ticket | None:
        """A ticket for this request's id in its legacy session; None outside one."""
        if session is None:
            return None
        return self.ids.begin(session_scope(server, session), request_id)

    def end(self, ticket: Ticket | None, answered: bool) -> None:
        if ticket is not None:
            self.ids.end(ticket, answered)

    def answered(self, server: Server, session: str | None, http_method: str, status: int) -> None:
        """The upstream's status for a request in `session`: forget the session (and
        its entries on that server) when the upstream ended it or no longer knows it."""
        if session is None:
            return
        if (http_method == "DELETE" and 200 <= status < 300) or status == 404:
            scope = session_scope(server, session)
            self._ended[scope] = True
            self.ids.forget_session(scope)
            self._cache.purge_session(scope)

    def ended(self, scope: str) -> bool:
        """Whether the session of this scope has ended (as far as it is remembered)."""
        return scope in self._ended
