"""`--servers-file`: the operator-owned file gives the sidecar its servers and nothing
else; listeners, budgets, limits and allowed hosts are the sidecar's own settings."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import httpx
import yaml

from mcpcache.sidecar.config import parse_config, parse_servers_file
from peers.clients import http_get
from peers.serving import end_process_group, free_port, wait_until

SIDECAR = [sys.executable, "-m", "mcpcache.sidecar.cli", "sidecar"]
HOSTILE = {
    "servers": [{"name": "docs", "url": "http://docs.tools.svc:8000/mcp"}],
    "listen": {"host": "0.0.0.0", "port": 3500},
    "metrics": {"host": "0.0.0.0", "port": 1},
    "cache": {"maxEntries": 1},
    "allowedHosts": ["evil.example"],
    "maxRequestBytes": "1Gi",
    "appId": "someone-else",
}


def test_only_servers_are_taken_from_the_file_and_the_rest_is_named(caplog) -> None:
    text = yaml.safe_dump(HOSTILE)
    environ = {"MCPCACHE_APP_ID": "checkout"}
    with caplog.at_level(logging.WARNING, logger="mcpcache.sidecar.config"):
        config = parse_servers_file(text, environ=environ)
    defaults = parse_config("servers: []", environ=environ)
    assert [s.name for s in config.servers] == ["docs"]
    assert config.model_copy(update={"servers": ()}) == defaults
    (record,) = caplog.records
    assert record.ignored == [
        "allowedHosts",
        "appId",
        "cache",
        "listen",
        "maxRequestBytes",
        "metrics",
    ]


def test_the_whole_file_still_configures_a_standalone_sidecar() -> None:
    config = parse_config(yaml.safe_dump(HOSTILE), environ={})
    assert config.listen.host == "0.0.0.0"
    assert config.allowed_hosts == ("evil.example",)


def test_a_sidecar_process_listens_where_its_environment_says(tmp_path: Path) -> None:
    servers_file = tmp_path / "config.yaml"
    servers_file.write_text(yaml.safe_dump(HOSTILE))
    listen, metrics = free_port(), free_port()
    env = os.environ | {"MCPCACHE_LISTEN_PORT": str(listen), "MCPCACHE_METRICS_PORT": str(metrics)}
    log = tmp_path / "sidecar.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*SIDECAR, "--servers-file", str(servers_file)],
            env=env,
            stderr=out,
            start_new_session=True,
        )
    try:

        def ready() -> bool:
            try:
                return http_get(f"http://127.0.0.1:{metrics}/readyz", timeout=2).is_success
            except httpx.HTTPError:
                return False

        wait_until(ready, 30, "the sidecar")
        answer = httpx.post(
            f"http://127.0.0.1:{listen}/mcp/nowhere",
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            timeout=5,
        )
        assert answer.status_code == 404, "the proxy listens on the port from the environment"
        assert "keys other than 'servers' are ignored" in log.read_text()
    finally:
        end_process_group(process)


def test_config_and_servers_file_are_one_or_the_other(tmp_path: Path) -> None:
    result = subprocess.run(
        [*SIDECAR, "--config", "a.yaml", "--servers-file", "b.yaml"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "not allowed with argument" in result.stderr
