"""The command line, run as a real process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpcache.sidecar.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_the_demo_answers_repeats_from_cache() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("Cache-Status: mcpcache; hit") == 2
    assert "upstream searches actually run: 1" in result.stdout
    assert (
        'mcpcache_requests_total{method="tools/call",outcome="hit",server="docs"} 2.0'
        in result.stdout
    )


def test_check_config_prints_the_effective_configuration(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "servers: [{name: docs, url: 'http://d/mcp', cache: {enabled: true, maxSize: 4Mi}}]"
    )
    result = run("check-config", str(path))
    assert result.returncode == 0
    assert "maxSize: 4Mi" in result.stdout
    assert "ttl: 30s" in result.stdout


def test_check_config_never_prints_the_shared_cache_password(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("servers: []\nsharedCache: {url: 'rediss://agents:hunter2@redis:6380/0'}")
    result = run("check-config", str(path))
    assert result.returncode == 0
    assert "hunter2" not in result.stdout
    assert "url: rediss://agents:***@redis:6380/0" in result.stdout
    assert "timeout: 50ms" in result.stdout


def test_check_config_explains_an_invalid_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("servers: [{name: docs, url: 'gopher://d'}]")
    result = run("check-config", str(path))
    assert result.returncode == 1
    assert "not an http or https URL" in result.stderr


def test_the_sidecar_refuses_to_start_on_an_invalid_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("servers: 3")
    result = run("sidecar", "--config", str(path))
    assert result.returncode == 2
    assert "invalid configuration" in result.stderr
