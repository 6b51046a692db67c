"""The probes: `/healthz` (the process answers) and `/readyz` (its webhook answers).

Every replica serves the injection webhook, leader or not, so readiness is about the
webhook only: a replica is ready when its TLS listener completes a handshake and answers
HTTP. The Service then sends admissions only to replicas that can take them, whichever
of them holds the Lease.
"""

from __future__ import annotations

import ssl

import aiohttp
from aiohttp import web

PROBE_TIMEOUT = 2.0


async def webhook_answers(port: int) -> bool:
    # Our own listener on loopback: the question is whether it answers, not who it is.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"https://127.0.0.1:{port}/", ssl=context) as response,
        ):
            return response.status < 500
    except (TimeoutError, aiohttp.ClientError, OSError):
        return False


class HealthServer:
    def __init__(self, port: int, webhook_port: int | None) -> None:
        self.port = port
        self.webhook_port = webhook_port
        self._runner: web.AppRunner | None = None

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.webhook_port is not None and not await webhook_answers(self.webhook_port):
            return web.json_response({"status": "webhook not answering"}, status=503)
        return web.json_response({"status": "ok"})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "0.0.0.0", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
