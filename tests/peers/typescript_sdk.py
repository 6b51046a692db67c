"""The stock TypeScript MCP SDK's Streamable HTTP server, as a second kind of upstream.

The Python and TypeScript SDKs differ exactly where isolation bugs live: the TypeScript
server routes each answer to the stream of the request with that id, ids compared as
JSON numbers (`1`, `1.0` and `1e0` are one id). `typescript/install.sh` installs the SDK
pinned by its lock file (tests/run.sh runs it once and passes the directory on).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from .serving import end_process_group, wait_until

INSTALL = Path(__file__).parent / "typescript" / "install.sh"
ENV = "MCPCACHE_TYPESCRIPT_PEERS"


def peers_directory() -> Path:
    """Where server.mjs and the SDK are installed."""
    return node_installed(INSTALL, ENV, "the TypeScript SDK peer")


def node_installed(install: Path, env: str, what: str) -> Path:
    """The directory the npm install script `install` prints (tests/run.sh runs it once
    and passes it on in `env`); without Node the test skips (under CI it fails: .ci/run
    has Node)."""
    if found := os.environ.get(env):
        return Path(found)
    if shutil.which("node") is None or shutil.which("npm") is None:
        reason = f"no Node.js: {what} cannot run"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    out = subprocess.run(["bash", str(install)], check=True, capture_output=True, text=True)
    directory = Path(out.stdout.strip().splitlines()[-1])
    os.environ[env] = str(directory)
    return directory


class TypeScriptServer:
    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp"

    @property
    def calls(self) -> int:
        """How many tool calls the server has run."""
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            f"http://127.0.0.1:{self.port}/calls", timeout=5
        ) as response:
            return int(response.read())


@contextmanager
def typescript_server(json_response: bool = False) -> Iterator[TypeScriptServer]:
    """The TypeScript SDK server on a free loopback port, ended by its PID afterwards."""
    directory = peers_directory()
    env = {**os.environ, "JSON_RESPONSE": "1" if json_response else "0"}
    process = subprocess.Popen(
        ["node", "server.mjs"],
        cwd=directory,
        env=env,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        line = wait_until(process.stdout.readline, 20, "the TypeScript server to listen")
        yield TypeScriptServer(int(json.loads(line)["port"]))
    finally:
        end_process_group(process, 5)


def typescript_client_calls(
    url: str, tool: str, arguments: dict[str, object], times: int
) -> list[dict[str, Any]]:
    """Run the TypeScript SDK client: one session, `times` identical calls; each call's
    `Cache-Status`, answer text and `_meta`. Every request it makes has a 10 s timeout."""
    directory = peers_directory()
    out = subprocess.run(
        ["node", "client.mjs", url, tool, json.dumps(arguments), str(times)],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]
