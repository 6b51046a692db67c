"""The MCP conformance suite's server scenarios pass through the sidecar on a warm cache
as on a cold one: those for what a call's stream carries against the suite's SDK
upstream (a hit replays the log lines and the progress the upstream sent, under the
suite's own progress token, not the result alone), and every scenario the reference
servers' everything server passes on its own, through a sidecar that caches its calls,
reads and listings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from peers.conformance_suite import everything_server, run_server_scenario, suite_directory
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


EVERYTHING = [
    "server-initialize",
    "logging-set-level",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "server-sse-multiple-streams",
    "resources-list",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
]
"""The server scenarios the reference servers' everything server passes on its own (the
others ask for tools, resources and prompts of the suite's own example server, which
no registry ships)."""
ANSWERED_WARM = {
    "tools-list": "tools/list",
    "resources-list": "resources/list",
    "prompts-list": "prompts/list",
}
"""Scenarios whose warm run the cache answers, and the method it answers (the everything
server answers the simple-text scenario's call with an `isError` result, which is never
stored, though the scenario accepts it)."""


@pytest.fixture(scope="module")
def everything(conformance_suite: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("everything") / "server.log"
    with everything_server(conformance_suite, log) as url:
        yield url


@pytest.mark.parametrize("scenario", EVERYTHING)
def test_a_scenario_the_everything_server_passes_passes_through_the_sidecar_cold_and_warm(
    make_sidecar, everything: str, conformance_suite: Path, tmp_path: Path, scenario: str
) -> None:
    sidecar = make_sidecar(one_server(everything, metadataTTL="5m"))
    for run in ("cold", "warm"):
        checks = run_server_scenario(conformance_suite, sidecar.url("s"), scenario, tmp_path)
        failed = [c for c in checks if c["status"] != "SUCCESS"]
        assert checks, (run, "no checks")
        assert not failed, (run, [(c.get("errorMessage"), c.get("details")) for c in failed])
    if scenario in ANSWERED_WARM:
        method = ANSWERED_WARM[scenario]
        assert sidecar.sample("mcpcache_requests_total", server="s", method=method, outcome="hit")
