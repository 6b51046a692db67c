"""Running an ASGI app under uvicorn in a thread of its own, on a real loopback socket."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn


def free_port() -> int:
    """A loopback port nothing listens on right now (for processes that bind it themselves)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def loopback_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy, or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


async def async_wait_until(
    predicate: Callable[[], Any], limit: float = 10.0, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {limit}s waiting for {what}")
        await asyncio.sleep(0.01)


async def past(moment: float) -> None:
    """Until the monotonic clock has passed `moment`: for a test whose awaited thing is
    time itself (an entry's TTL running out)."""
    await async_wait_until(lambda: time.monotonic() > moment, 30, "the clock")


class Stopping:
    """Peers asked to stop whose last steps have not been waited for yet.

    uvicorn takes 0.1 to 0.2 s to stop a server however idle (it notices the request on
    its next 0.1 s tick, then waits a fixed 0.1 s for connections to wind down): as long
    as the test after it runs, when that part of a teardown has no observable effect
    left. `finish` waits for all of them and fails if one did not stop; the suite calls it
    at the end of the session, and `reap` closes those already stopped as it goes.
    """

    def __init__(self) -> None:
        self._pending: list[tuple[threading.Thread, Callable[[], None]]] = []

    def later(self, thread: threading.Thread, last_steps: Callable[[], None]) -> None:
        """`last_steps` (a join that fails when the peer does not stop, then its clean-up)
        run once `thread` ends, or at `finish`."""
        self._pending.append((thread, last_steps))
        self.reap()

    def reap(self) -> None:
        """Run the last steps of every peer that has stopped by now, without waiting."""
        done = [entry for entry in self._pending if not entry[0].is_alive()]
        self._pending = [entry for entry in self._pending if entry[0].is_alive()]
        for _, last_steps in done:
            last_steps()

    def finish(self) -> None:
        """Wait for every peer to stop, running their last steps; fail if one does not."""
        pending, self._pending = self._pending, []
        errors = []
        for _, last_steps in pending:
            try:
                last_steps()
            except Exception as exc:  # every peer is waited for before any error is raised
                errors.append(exc)
        if errors:
            raise errors[0]


STOPPING = Stopping()
"""The suite's one list of peers still stopping."""


class ThreadLoop:
    """Runs one coroutine in an event loop on its own thread."""

    def __init__(self, main: Callable[[], Awaitable[None]], name: str) -> None:
        self._main = main
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())  # type: ignore[arg-type]
        except BaseException as exc:
            self.error = exc

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float = 15.0) -> None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise RuntimeError(f"{self.thread.name} did not stop within {timeout}s")


class ServedApp:
    """An ASGI app served by uvicorn on 127.0.0.1 in a background thread."""

    def __init__(self, app: Any, lifespan: str = "on") -> None:
        self.socket = loopback_socket()
        self.port: int = self.socket.getsockname()[1]
        config = uvicorn.Config(
            app, log_config=None, access_log=False, lifespan=lifespan, timeout_graceful_shutdown=2
        )
        self.server = uvicorn.Server(config)
        self._loop = ThreadLoop(lambda: self.server.serve(sockets=[self.socket]), "served-app")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServedApp:
        self._loop.start()
        wait_until(lambda: self.server.started or self._loop.error, what="uvicorn to start")
        if self._loop.error:
            raise self._loop.error
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._finish()

    def stop_soon(self) -> None:
        """Stop, waiting for the server's last steps only later (`STOPPING`): for a
        fixture's teardown, once nothing of the test talks to this server any more."""
        self.server.should_exit = True
        STOPPING.later(self._loop.thread, self._finish)

    def _finish(self) -> None:
        self._loop.join()
        self.socket.close()


@contextlib.contextmanager
def served(app: Any, lifespan: str = "on") -> Iterator[ServedApp]:
    running = ServedApp(app, lifespan).start()
    try:
        yield running
    finally:
        running.stop()


def spawn(
    args: list[str], log_path: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start a process in a session of its own (end it with `end_process_group`), its
    output going to `log_path`."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def log_tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file, for an error message; empty when there is none."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def end_process_group(process: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM a process started with `start_new_session=True`, SIGKILL after `grace`."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
