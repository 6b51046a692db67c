"""The MCP conformance suite's server scenarios for what a call's stream carries pass
through the sidecar on a warm cache as on a cold one: a hit replays the log lines and
the progress the upstream sent (under the suite's own progress token), not the result
alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from peers.conformance_suite import run_server_scenario, suite_directory
from peers.sidecar import one_server

SCENARIOS = {
    "tools-call-with-logging": "test_tool_with_logging",
    "tools-call-with-progress": "test_tool_with_progress",
}


@pytest.fixture(scope="module")
def conformance_suite() -> Path:
    return suite_directory()


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_conformance_scenario_passes_on_a_cold_and_on_a_warm_cache(
    make_sidecar, upstream, conformance_suite: Path, tmp_path: Path, scenario: str
) -> None:
    peer, app = upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    tool = SCENARIOS[scenario]
    before = peer.calls[tool]
    for run in ("cold", "warm"):
        checks = run_server_scenario(conformance_suite, sidecar.url("s"), scenario, tmp_path)
        assert [c["status"] for c in checks] == ["SUCCESS"], (
            run,
            [c.get("errorMessage") for c in checks],
            [c.get("details") for c in checks],
        )
    assert peer.calls[tool] == before + 1, "the warm run was answered by the cache"
    hits = sidecar.sample("mcpcache_requests_total", server="s", method="tools/call", outcome="hit")
    assert hits == 1
