"""The request as the caching rules read it: one value that travels whole, instead of
the six things that always go together."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ...config import Server
from .messages import Message


class Asked(NamedTuple):
    """One MCP request to one server, as read: its message, its headers (by lower-case
    name, and every copy in order as sent), its query string (the upstream sees it), and
    whether its legacy session is bound (keyed as on a `sessionScoped` server: a session
    not opened here by exactly this request's keyed headers and query,
    `upstream.sessions`)."""

    server: Server
    message: Message
    headers: Mapping[str, str]
    raw_headers: Sequence[tuple[str, str]]
    query: str = ""
    bound_session: bool = False

    @classmethod
    def of(cls, server: Server, message: Message, headers: Mapping[str, str]) -> Asked:
        """A request whose headers were each sent once (in tests and tools)."""
        return cls(server, message, headers, tuple(headers.items()))
