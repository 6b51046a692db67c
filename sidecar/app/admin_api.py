"""The admin endpoints' routes: a FastAPI app over `Admin`, loaded by its first request
that passes the guards (`Admin.__call__`), never by an idle sidecar.

FastAPI routes and dispatches on the method; the bodies stay read by `Admin.purge`, under
its size limit and with its own messages, and every refusal is a JSON-RPC error like
the proxy's (`edge.errors`), not FastAPI's `{"detail": ...}`.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException
from starlette.responses import Response

from ..edge.errors import ProxyError
from ..edge.incoming import Incoming
from ..rules.protocol.messages import INVALID_REQUEST
from .admin import PURGE_PATH, STATS_PATH, SUGGEST_PATH, Admin, json_response, not_allowed


def admin_api(admin: Admin) -> FastAPI:
    # No slash redirects: `/admin/stats/` is no endpoint, as it was never one.
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None, redirect_slashes=False)

    @app.exception_handler(ProxyError)
    async def refused(request: Request, error: ProxyError) -> Response:
        return error.to_response()

    @app.exception_handler(HTTPException)
    async def unrouted(request: Request, error: HTTPException) -> Response:
        if error.status_code == 405 and error.headers is not None:
            return not_allowed(request.method, error.headers["Allow"]).to_response()
        path = request.scope["path"]
        return ProxyError(404, INVALID_REQUEST, f"no admin endpoint at {path}").to_response()

    @app.post(PURGE_PATH)
    async def purge(request: Request) -> Response:
        return await admin.purge(Incoming(request.scope, request.receive))

    @app.get(STATS_PATH)
    async def stats() -> Response:
        return json_response(admin.stats())

    @app.get(SUGGEST_PATH)
    async def suggest() -> Response:
        return json_response(admin.suggest())

    return app
