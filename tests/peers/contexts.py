"""A raw upstream that answers every request by its whole authorization context: the
credential, a tenant named by a header or the query string, and the legacy session, to
which it binds the user that opened it at `initialize`. Written by hand (not the SDK)
because the SDK's server cannot be made to bind users to sessions or pick tenants this
way; `answer` is also the tests' oracle of what the upstream would say.

- `Authorization: Bearer alice` is a member of tenant a, `Bearer bob` of a and b;
  absent or empty is anonymous; anything else (junk, a scheme alone) is refused (401).
- The tenant is `X-Tenant`, else the query's `tenant=`, else a.
- In a session, a call without a credential is its opener's; an unknown or ended
  session is a 404; an `initialize` sent with a live session id is answered, and one
  with a member's credential signs the session in as that member.
- A credential can be revoked (`revoked`): refused from then on.
- Tools: `hello` answers anyone; `search` answers members of the tenant (401 for the
  anonymous, 403 for others) by its arguments and the tenant alone; `whoami` answers
  members with who they are.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from peers.asgi import headers_of, read_body

MEMBERS = {"Bearer alice": frozenset({"a"}), "Bearer bob": frozenset({"a", "b"})}
SESSION = "mcp-session-id"


@dataclass
class ContextUpstream:
    opened: dict[str, str | None] = field(default_factory=dict)
    """Each live session and the credential that opened it (None: anonymous)."""
    ended: dict[str, str | None] = field(default_factory=dict)
    """Each ended session and the credential that had opened it."""
    calls: int = 0
    revoked: set[str] = field(default_factory=set)

    def answer(
        self,
        headers: Mapping[str, str],
        query: str,
        message: dict[str, Any],
        while_live: bool = False,
    ) -> tuple[int, dict[str, Any]]:
        """What this upstream answers a `tools/call`, as it stands now (`while_live`: as
        it did while the request's ended session was live): the HTTP status and the
        JSON-RPC message (pure: changes nothing)."""
        request_id = message.get("id")
        session = headers.get(SESSION)
        credential = headers.get("authorization") or None
        if credential is not None and not self._member(credential):
            return _error(401, request_id, "unknown credential")
        if session is not None:
            opened = self.opened | self.ended if while_live else self.opened
            if session not in opened:
                return _error(404, request_id, "no such session")
            credential = credential or opened[session]
        tenant = headers.get("x-tenant") or parse_qs(query).get("tenant", ["a"])[0]
        params = message.get("params", {})
        tool, arguments = params.get("name"), params.get("arguments", {})
        q = arguments.get("q")
        if tool == "hello":
            return _result(request_id, f"hello {q} @{tenant}")
        if credential is None:
            return _error(401, request_id, "sign in")
        if tenant not in MEMBERS[credential]:
            return _error(403, request_id, f"not a member of {tenant}")
        if tool == "search":
            return _result(request_id, f"search {q} @{tenant}")
        return _result(request_id, f"{credential} {q} @{tenant}")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = headers_of(scope)
        query = scope["query_string"].decode("latin-1")
        session = headers.get(SESSION)
        body = await read_body(receive)
        extra: list[tuple[bytes, bytes]] = []
        if scope["method"] == "DELETE":
            status, reply = (200, None) if self._end(session) else (404, None)
        else:
            message = json.loads(body)
            if "id" not in message:  # a notification
                status, reply = 202, None
            elif message.get("method") == "initialize":
                status, reply, opened = self._initialize(headers, session, message)
                extra = [(SESSION.encode(), opened.encode())] if opened else []
            else:
                self.calls += 1
                status, reply = self.answer(headers, query, message)
        content = b"" if reply is None else json.dumps(reply).encode()
        sent = [(b"content-type", b"application/json"), *extra]
        await send({"type": "http.response.start", "status": status, "headers": sent})
        await send({"type": "http.response.body", "body": content})

    def _initialize(
        self, headers: Mapping[str, str], session: str | None, message: dict[str, Any]
    ) -> tuple[int, dict[str, Any], str | None]:
        credential = headers.get("authorization") or None
        if credential is not None and not self._member(credential):
            return *_error(401, message["id"], "unknown credential"), None
        if session is not None and session not in self.opened:
            return *_error(404, message["id"], "no such session"), None
        if session is None:
            session = uuid.uuid4().hex
            self.opened[session] = credential
        elif credential is not None:  # signed in inside the session
            self.opened[session] = credential
        result = {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "contexts", "version": "1"},
        }
        return 200, {"jsonrpc": "2.0", "id": message["id"], "result": result}, session

    def _member(self, credential: str) -> bool:
        return credential in MEMBERS and credential not in self.revoked

    def _end(self, session: str | None) -> bool:
        if session is None or session not in self.opened:
            return False
        self.ended[session] = self.opened.pop(session)
        return True


def _result(request_id: Any, text: str) -> tuple[int, dict[str, Any]]:
    result = {"content": [{"type": "text", "text": text}]}
    return 200, {"jsonrpc": "2.0", "id": request_id, "result": result}


def _error(status: int, request_id: Any, message: str) -> tuple[int, dict[str, Any]]:
    return status, {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": -32001, "message": message},
    }
