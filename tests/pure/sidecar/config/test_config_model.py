from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from mcpcache.sidecar.config import (
    MAX_SIZE_CEILING,
    ConfigError,
    dump_config,
    load_config,
    parse_config,
)
from mcpcache.sidecar.config.tools import (
    MAX_SKIP_VALUE_LENGTH,
    ToolRule,
    is_catch_all,
    value_text,
)

MINIMAL = """
servers:
  - name: docs
    url: http://docs-mcp.tools.svc:8000/mcp
"""

FULL = """
appId: checkout-agent
listen: {host: 127.0.0.1, port: 3500}
metrics: {host: 0.0.0.0, port: 9090}
cache: {maxEntries: 1024, maxBytes: 64Mi}
servers:
  - name: docs
    url: http://docs-mcp.tools.svc:8000/mcp
    timeout: 30s
    cache: {enabled: true, ttl: 60s, maxSize: 256Ki, metadataTTL: 5m, staleIfError: 10m,
            staleWhileRevalidate: 30s}
"""


def test_every_field_but_servers_has_a_default() -> None:
    config = parse_config(MINIMAL, environ={})
    assert config.app_id == "default"
    assert (config.listen.host, config.listen.port) == ("127.0.0.1", 3500)
    assert (config.metrics.host, config.metrics.port) == ("127.0.0.1", 9090)
    assert (config.cache.max_entries, config.cache.max_bytes) == (1024, 64 << 20)
    server = config.servers[0]
    assert (server.cache.enabled, server.cache.ttl, server.cache.max_size) == (False, 30, 65536)
    assert server.cache.metadata_ttl is None, "lists are not cached unless asked"
    assert server.cache.keep_stale == 0, "no stale answers unless asked"
    assert server.timeout == 30


def test_the_documented_shape_parses_and_round_trips() -> None:
    config = parse_config(FULL, environ={})
    server = config.server("docs")
    assert server is not None
    assert server.cache.ttl == 60
    assert server.cache.max_size == 256 << 10
    assert server.cache.metadata_ttl == 300
    assert (server.cache.stale_if_error, server.cache.stale_while_revalidate) == (600, 30)
    assert server.cache.keep_stale == 600
    assert parse_config(dump_config(config), environ={}) == config
    assert "maxSize: 256Ki" in dump_config(config)
    assert "ttl: 1m" in dump_config(config)


def test_json_is_accepted_too(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"servers": [{"name": "a", "url": "https://a.example/mcp"}]}')
    assert load_config(path, environ={}).servers[0].url == "https://a.example/mcp"


def test_max_size_above_one_mebibyte_is_clamped_not_refused() -> None:
    config = parse_config(MINIMAL.replace("/mcp", "/mcp\n    cache: {maxSize: 8Mi}"), environ={})
    cache = config.servers[0].cache
    assert cache.max_size_clamped
    assert cache.effective_max_size == MAX_SIZE_CEILING


def test_environment_overrides_app_id_ports_and_cache_budget() -> None:
    config = parse_config(
        MINIMAL,
        environ={
            "MCPCACHE_APP_ID": "billing",
            "MCPCACHE_LISTEN_PORT": "4000",
            "MCPCACHE_METRICS_PORT": "9191",
            "MCPCACHE_CACHE_MAX_ENTRIES": "200",
            "MCPCACHE_CACHE_MAX_BYTES": "16Mi",
        },
    )
    assert (config.app_id, config.listen.port, config.metrics.port) == ("billing", 4000, 9191)
    assert (config.cache.max_entries, config.cache.max_bytes) == (200, 16 << 20)


def test_a_bad_environment_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(MINIMAL, environ={"MCPCACHE_CACHE_MAX_BYTES": "lots"})
    assert str(refused.value) == (
        "MCPCACHE_CACHE_MAX_BYTES: 'lots' is not allowed: use a size such as 64Mi"
    )


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("servers: [{name: a, url: ftp://x/mcp}]", "not an http or https URL"),
        ("servers: [{name: a, url: http://x, cache: {ttl: 5 minutes}}]", "invalid duration"),
        ("servers: [{name: a, url: http://x, cache: {maxSize: lots}}]", "invalid quantity"),
        ("servers: [{name: a, url: http://x}, {name: a, url: http://y}]", "more than once"),
        ("servers: [{name: a, url: http://x, colour: red}]", "colour: is not a field here"),
        ("appId: x", "servers"),
        ("[1, 2]", "mapping"),
        ("servers: [", "not valid YAML"),
    ],
)
def test_invalid_files_are_refused_with_a_reason(text: str, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        parse_config(text, environ={})


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:3500/mcp/docs", "http://localhost:3500/mcp", "http://[::1]:3500/x"],
)
def test_a_server_pointing_at_the_sidecars_own_listener_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="own listener"):
        parse_config(f"servers: [{{name: loop, url: '{url}'}}]", environ={})


def test_the_listen_port_from_the_environment_counts_for_the_loop_check() -> None:
    text = "servers: [{name: s, url: 'http://127.0.0.1:4000/mcp'}]"
    assert parse_config(text, environ={})
    with pytest.raises(ConfigError, match="own listener"):
        parse_config(text, environ={"MCPCACHE_LISTEN_PORT": "4000"})


def test_identity_headers_are_lowered_and_must_be_header_names() -> None:
    text = "servers: [{name: s, url: 'http://u/mcp', cache: {identityHeaders: [X-Tenant]}}]"
    assert parse_config(text, environ={}).servers[0].cache.identity_headers == ("x-tenant",)
    with pytest.raises(ConfigError, match="not an HTTP header name"):
        parse_config(text.replace("X-Tenant", "'bad header'"), environ={})


def test_a_rule_naming_a_value_twice_says_so() -> None:
    with pytest.raises(ValidationError) as refused:
        ToolRule.model_validate({"name": "t", "ignoreArguments": ["a", "a"]})
    assert refused.value.errors()[0]["msg"] == "Value error, must not name the same value twice"


def test_skip_if_values_have_one_to_256_characters() -> None:
    for length in (1, MAX_SKIP_VALUE_LENGTH):
        rule = ToolRule.model_validate({"name": "t", "skipIf": {"v": "x" * length}})
        assert rule.skip_if == {"v": ("x" * length,)}
    for length in (0, MAX_SKIP_VALUE_LENGTH + 1):
        with pytest.raises(ValidationError, match="a skipIf value has 1 to 256 characters"):
            ToolRule.model_validate({"name": "t", "skipIf": {"v": "x" * length}})


def test_only_a_pattern_of_stars_catches_every_tool() -> None:
    assert is_catch_all("*")
    assert is_catch_all("**")
    assert not is_catch_all("*x")
    assert not is_catch_all("X")


def test_argument_values_compare_as_loose_text_and_objects_not_at_all() -> None:
    assert value_text(True) == value_text("true") == value_text(1) == "1"
    assert value_text(False) == value_text("false") == value_text(0) == "0"
    assert value_text(None) == "null"
    assert value_text(2.0) == "2"
    assert value_text(2.5) == "2.5"
    assert value_text(7) == "7"
    assert value_text("Latest") == "latest"
    assert value_text(["a"]) is None
    assert value_text({"a": 1}) is None


def test_a_glob_shadows_a_later_literal_name_it_matches() -> None:
    earlier = ToolRule.model_validate({"name": "get_*"})
    assert ToolRule.model_validate({"name": "get_X"}).shadowed_by(earlier)
    assert not ToolRule.model_validate({"name": "get_X*"}).shadowed_by(earlier)
