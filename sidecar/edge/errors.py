"""The one place that turns failures into HTTP statuses with JSON-RPC error bodies."""

from __future__ import annotations

from typing import Any, Final

import orjson
from starlette.responses import Response

UPSTREAM_UNAVAILABLE: Final = -32001
"""Implementation-defined server error: the upstream could not be reached or failed."""
UPSTREAM_TIMEOUT: Final = -32002
UNKNOWN_SERVER: Final = -32003
REQUEST_TOO_LARGE: Final = -32004
FORBIDDEN: Final = -32005
LOOP_DETECTED: Final = -32006


def error_body(code: int, message: str, request_id: Any = None, data: Any = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


class ProxyError(Exception):
    """A request the sidecar answers itself, with `status` and a JSON-RPC error."""

    def __init__(
        self,
        status: int,
        code: int,
        message: str,
        request_id: Any = None,
        data: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id
        self.data = data
        self.headers = headers or {}

    def to_response(self) -> Response:
        return Response(
            error_body(self.code, self.message, self.request_id, self.data),
            status_code=self.status,
            media_type="application/json",
            headers=self.headers,
        )
