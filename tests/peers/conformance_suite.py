"""The MCP conformance suite (`@modelcontextprotocol/conformance`), whose server
scenarios connect to a server as an MCP client (the TypeScript SDK's) and check what it
does. `conformance/install.sh` installs the version its lock file pins (tests/run.sh
runs it once and passes the directory on); it runs with `conformance/node20.mjs`, which
lends it the one Node 22 function it imports (for its reports, not its scenarios)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from peers.serving import end_process_group, free_port, log_tail, spawn, wait_until
from peers.typescript_sdk import node_installed

INSTALL = Path(__file__).parent / "conformance" / "install.sh"
ENV = "MCPCACHE_CONFORMANCE"
SCENARIO_SECONDS = 60
"""The most one scenario may take (its own calls time out at 30 s)."""


def suite_directory() -> Path:
    """Where the suite is installed."""
    return node_installed(INSTALL, ENV, "the conformance suite")


def run_server_scenario(
    suite: Path, url: str, scenario: str, workdir: Path
) -> list[dict[str, Any]]:
    """Run one server scenario against `url`; its checks (each with a `status`). The
    suite writes its results under `workdir`."""
    main = suite / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    shim, results = suite / "node20.mjs", workdir / "results"
    command = ["node", "--import", str(shim), str(main), "server", "--url", url]
    command += ["--scenario", scenario, "--output-dir", str(results)]
    ran = subprocess.run(
        command, cwd=workdir, capture_output=True, timeout=SCENARIO_SECONDS, check=False
    )
    found = list(results.rglob("checks.json"))
    assert len(found) == 1, ran.stderr.decode(errors="replace")[-2000:]
    checks: list[dict[str, Any]] = json.loads(found[0].read_text())
    shutil.rmtree(results)
    return checks


@contextlib.contextmanager
def everything_server(suite: Path, log: Path) -> Iterator[str]:
    """The MCP reference servers' everything server (installed beside the suite), over
    Streamable HTTP on a port of its own: its `/mcp` URL while it runs."""
    main = suite / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist"
    port = free_port()
    env = {**os.environ, "PORT": str(port)}
    process = spawn(["node", str(main / "index.js"), "streamableHttp"], log, env)
    try:
        wait_until(lambda: _listening(port), 30, f"the everything server\n{log_tail(log)}")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        end_process_group(process)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
