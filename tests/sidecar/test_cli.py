"""The command line, run as a real process."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

from peers.serving import free_port, wait_until

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


def test_an_unknown_log_level_is_a_usage_error_naming_the_levels(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("servers: [{name: docs, url: 'http://127.0.0.1:9/mcp'}]")
    result = run("sidecar", "--config", str(path), "--log-level", "bogus")
    assert result.returncode == 2
    assert "invalid choice: 'BOGUS'" in result.stderr
    assert "Traceback" not in result.stderr


def test_version_prints_the_installed_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"mcpcache {importlib.metadata.version('mcpcache')}"


def test_a_command_whose_extras_are_missing_says_how_to_install_them() -> None:
    # kopf made unimportable in this process only, as in an install without `[operator]`.
    code = (
        "import sys; sys.modules['kopf'] = None; "
        "from mcpcache.sidecar.cli import main; sys.exit(main(['operator']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "mcpcache operator: needs the operator extras, which are not installed (missing: "
        "kopf); install them with: pip install 'mcpcache[operator]'"
    )


def test_an_invalid_file_is_one_line_per_problem_on_check_and_in_the_start_up_log(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("servers: [{name: docs, url: 'http://d/mcp', cache: {ttl: 60, maxSize: 0}}]")
    checked = run("check-config", str(path))
    assert checked.returncode == 1
    assert checked.stderr.splitlines() == [
        "invalid: servers[0].cache.ttl: 60 has no unit: write a duration with one, e.g. 60s or 5m",
        "invalid: servers[0].cache.maxSize: 0 is not allowed: must be at least 1",
    ]
    started = run("sidecar", "--config", str(path))
    assert started.returncode == 2
    (line,) = started.stderr.splitlines()
    record = json.loads(line)
    assert record["msg"] == "cannot start: invalid configuration"
    assert record["problems"] == [
        problem.removeprefix("invalid: ") for problem in checked.stderr.splitlines()
    ]


def test_the_logs_are_one_json_object_a_line_without_colour_or_repeats(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "servers: [{name: docs, url: 'http://127.0.0.1:1/mcp'}]\n"
        f"listen: {{host: 127.0.0.1, port: {free_port()}}}\n"
        f"metrics: {{host: 127.0.0.1, port: {free_port()}}}\n"
    )
    log = tmp_path / "stderr.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "mcpcache.sidecar.cli", "sidecar", "--config", str(path)],
            stderr=stderr,
        )
        try:
            wait_until(lambda: "sidecar ready" in log.read_text(), 30, "the sidecar to start")
        finally:
            process.terminate()
            process.wait(10)
    text = log.read_text()
    assert "\\u001b" not in text
    assert "\x1b" not in text
    records = [json.loads(line) for line in text.splitlines()]
    assert not [r for r in records if "color_message" in r]
    messages = [r["msg"] for r in records]
    assert len([m for m in messages if m.startswith("Started server process")]) == 1
    assert len([m for m in messages if m.startswith("Uvicorn running on")]) == 2
