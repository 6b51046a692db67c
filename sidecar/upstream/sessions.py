"""The legacy sessions that requests pass upstream in.

Inside a legacy session (`Mcp-Session-Id`), each request holds a ticket for its JSON-RPC
id until its answer has passed (see `rules.protocol.session_ids`): an answer given while another
request used the same id may be that request's, and is neither stored nor shared. A
session the upstream ended (a DELETE it accepted) or no longer knows (a 404) takes its
entries with it, and is remembered for a while, so that an answer still in flight when
it ended is not stored after its entries were dropped.

A session is no identity (`rules.key.callers.session_keyed`), except where the server may
have made it one: a server that binds a user to a session at `initialize` may take
later requests of that session with other credentials, or none, and it may know the
user by any header or by the query string, not only by the identity headers. So the
sidecar keeps, for each session it saw opened, a digest of every keyed header its
`initialize` carried but the session and the version, and of its query string
(`key.callers.opening_digest`; the last `OPENED_SESSIONS_KEPT` sessions), and a request
is keyed without its session only when it is in a session opened here by exactly the
same. The opener is the `initialize` that created the session: one that carried no
session id. An `initialize` sent inside an existing session (some transports let it
through) opens nothing; once answered, the upstream may have bound another user to the
session, so it counts as opened by nobody from then on. Any other request in a session keeps its
entries apart by session, as on a `sessionScoped` server: one whose headers or query
differ from its session's opening (no credential, a cookie every user shares, no
`X-User` where the opening sent one), and one in a session not known here (opened
through another replica or before a restart, made up, or forgotten among many): that
costs hits, never another caller's answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import cachetools

from ..cache.store import ResponseCache
from ..config import Server
from ..rules.key.cache_key import session_scope
from ..rules.key.callers import SESSION_HEADER, opening_digest
from ..rules.protocol.session_ids import SessionRequestIds, Ticket

ENDED_SESSIONS_KEPT: Final = 4096
"""How many ended legacy sessions are remembered."""
OPENED_SESSIONS_KEPT: Final = 16384
"""How many sessions opened here are remembered, with their opening's credentials."""


CONTESTED: Final = "contested"
"""The opener of a session two openers were answered with: no opener digest (a hex
digest or "") equals it, so every request in it keeps its entries by session."""


class LegacySessions:
    def __init__(self, cache: ResponseCache) -> None:
        self.ids = SessionRequestIds()
        self._cache = cache
        self._ended: cachetools.LRUCache[str, bool] = cachetools.LRUCache(ENDED_SESSIONS_KEPT)
        self._opened: cachetools.LRUCache[tuple[str, str], str] = cachetools.LRUCache(
            OPENED_SESSIONS_KEPT
        )
        """Each session opened here, by server and id (looked up on every request in a
        session, so not digested): its opener's digest (`key.callers.opening_digest`)."""

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
            self._opened.pop((server.name, session), None)
            self.ids.forget_session(scope)
            self._cache.purge_session(scope)

    def opened(self, server: Server, session: str, opener: str) -> None:
        """An `initialize` that carried no session id, whose opener digest
        (`key.callers.opening_digest`) is `opener`, was answered with this new session.
        Nothing rebinds a session: a second opener of the same id (an upstream that
        hands one id out twice) leaves it opened by nobody."""
        known = self._opened.get((server.name, session))
        self._opened[server.name, session] = opener if known in (None, opener) else CONTESTED

    def reopened(self, server: Server, session: str) -> None:
        """An `initialize` sent inside this session was answered: the upstream may have
        bound another user to it (signed it in, say), so it counts as opened by nobody
        from now on, and every request in it keeps its entries by session."""
        self._opened[server.name, session] = CONTESTED

    def bound(self, server: Server, headers: Mapping[str, str], query: str) -> bool:
        """Whether this request's session is key material for it: it is in a session
        not opened here by exactly its own keyed headers and query string (see the
        module docstring)."""
        session = headers.get(SESSION_HEADER)
        if not session or not session.strip():
            return False  # outside a session, or a blank one (`key.callers.caller_of`)
        opening = self._opened.get((server.name, session))
        return opening is None or opening != opening_digest(server, headers, query)

    def ended(self, scope: str) -> bool:
        """Whether the session of this scope has ended (as far as it is remembered)."""
        return scope in self._ended
