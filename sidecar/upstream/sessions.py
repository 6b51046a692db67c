"""The legacy sessions that requests pass upstream in.

Inside a legacy session (`Mcp-Session-Id`), each request holds a ticket for its JSON-RPC
id until its answer has passed (see `rules.session_ids`): an answer given while another
request used the same id may be that request's, and is neither stored nor shared. A
session the upstream ended (a DELETE it accepted) or no longer knows (a 404) takes its
entries with it, and is remembered for a while, so that an answer still in flight when
it ended is not stored after its entries were dropped.

A session is no identity (`rules.callers.session_keyed`), except where the server may
have made it one: a server that binds a user to a session at `initialize` may take
later requests of that session without credentials. So a session opened by an
`initialize` that carried a credential is remembered (the last `BOUND_SESSIONS_KEPT`),
and a request in it that carries none keeps its entries apart by session, as on a
`sessionScoped` server: it never reads what another anonymous session stored, nor
stores where one reads. (A session opened through another replica, or before this
sidecar started, is not known here: `sessionScoped` is the setting for such servers.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import cachetools

from ..cache.store import ResponseCache
from ..config import Server
from ..rules.callers import SESSION_HEADER, has_credential
from ..rules.policy import session_scope
from ..rules.session_ids import SessionRequestIds, Ticket

ENDED_SESSIONS_KEPT: Final = 4096
"""How many ended legacy sessions are remembered."""
BOUND_SESSIONS_KEPT: Final = 8192
"""How many sessions opened with a credential are remembered."""


class LegacySessions:
    def __init__(self, cache: ResponseCache) -> None:
        self.ids = SessionRequestIds()
        self._cache = cache
        self._ended: cachetools.LRUCache[str, bool] = cachetools.LRUCache(ENDED_SESSIONS_KEPT)
        self._bound: cachetools.LRUCache[str, bool] = cachetools.LRUCache(BOUND_SESSIONS_KEPT)

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
            self._bound.pop(scope, None)
            self.ids.forget_session(scope)
            self._cache.purge_session(scope)

    def opened(self, server: Server, session: str) -> None:
        """An `initialize` that carried a credential was answered with this session."""
        self._bound[session_scope(server, session)] = True

    def bound(self, server: Server, headers: Mapping[str, str]) -> bool:
        """Whether this request is in a session opened with a credential while it
        carries none itself: the server may have bound a user to the session."""
        if not self._bound:
            return False
        session = headers.get(SESSION_HEADER)
        if not session or has_credential(server, headers):
            return False
        return session_scope(server, session) in self._bound

    def ended(self, scope: str) -> bool:
        """Whether the session of this scope has ended (as far as it is remembered)."""
        return scope in self._ended
