"""Every configuration error is one line per problem, naming the field, the value and
what is allowed: the exact lines, for bad files and bad environment values."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import yaml

from mcpcache.sidecar.config import ConfigError, parse_config

URL = "http://docs.tools.svc:8000/mcp"


def server(**fields: Any) -> dict[str, Any]:
    return {"servers": [{"name": "docs", "url": URL, **fields}]}


def cache(**fields: Any) -> dict[str, Any]:
    return server(cache=fields)


BAD_FILES: list[tuple[dict[str, Any], list[str]]] = [
    (
        cache(ttl=60),
        ["servers[0].cache.ttl: 60 has no unit: write a duration with one, e.g. 60s or 5m"],
    ),
    (
        server(timeout=2.5),
        ["servers[0].timeout: 2.5 has no unit: write a duration with one, e.g. 2.5s or 5m"],
    ),
    (cache(ttl="25h"), ["servers[0].cache.ttl: 25h is not allowed: must be at most 24h"]),
    (cache(ttl="0s"), ["servers[0].cache.ttl: 0s is not allowed: must be more than 0s"]),
    (
        cache(ttl="soon"),
        [
            "servers[0].cache.ttl: invalid duration 'soon': use a number and a unit, e.g. "
            "30s, 5m, 1h30m"
        ],
    ),
    (
        cache(metadataTTL="0s", staleIfError="48h"),
        [
            "servers[0].cache.metadataTTL: 0s is not allowed: must be more than 0s",
            "servers[0].cache.staleIfError: 48h is not allowed: must be at most 24h",
        ],
    ),
    (
        cache(maxSize="64KiB"),
        [
            "servers[0].cache.maxSize: invalid quantity '64KiB': use bytes or a suffix, e.g. "
            "64Ki, 1Mi, 500k"
        ],
    ),
    (cache(maxSize=0), ["servers[0].cache.maxSize: 0 is not allowed: must be at least 1"]),
    (cache(tll="5s"), ["servers[0].cache.tll: is not a field here; did you mean ttl?"]),
    (
        cache(enabled="maybe"),
        ["servers[0].cache.enabled: 'maybe' is not allowed: must be true or false"],
    ),
    (
        cache(revalidateSample=2),
        ["servers[0].cache.revalidateSample: 2 is not allowed: must be at most 1.0"],
    ),
    (
        cache(ignoreHeaders=["authorization"]),
        [
            "servers[0].cache: ignoreHeaders cannot name authorization: it carries identity "
            "or the protocol and always stays in the key"
        ],
    ),
    (
        cache(identityHeaders=["bad header"]),
        ["servers[0].cache.identityHeaders: 'bad header' is not an HTTP header name"],
    ),
    (
        cache(tools=[{"name": "a", "scope": "everyone"}]),
        [
            "servers[0].cache.tools[0].scope: 'everyone' is not allowed: must be 'private' "
            "or 'public'"
        ],
    ),
    (
        cache(tools=[{"name": "a", "colour": 1}]),
        [
            "servers[0].cache.tools[0].colour: is not a field here; the fields are name, "
            "enabled, ttl, ignoreArguments, invalidates, skipIf, scope"
        ],
    ),
    (
        {"servers": [{"name": "Docs", "url": "ftp://x/mcp"}]},
        [
            "servers[0].name: 'Docs' is not allowed: use lowercase letters, digits, '-' and "
            "'.', starting and ending with a letter or digit",
            "servers[0].url: 'ftp://x/mcp' is not an http or https URL",
        ],
    ),
    ({"servers": [{"name": "docs"}]}, ["servers[0].url: is required"]),
    ({}, ["servers: is required"]),
    ({"servers": "docs"}, ["servers: 'docs' is not allowed: must be a list"]),
    (
        {"servers": [{"name": "docs", "url": URL}, {"name": "docs", "url": URL}]},
        ["server name 'docs' appears more than once"],
    ),
    (
        server(timeout=True),
        ["servers[0].timeout: true is not a duration: expected a duration such as 30s or 5m"],
    ),
    (
        {"listen": {"host": "127.0.0.1", "port": 70000}, "servers": []},
        ["listen.port: 70000 is not allowed: must be at most 65535"],
    ),
    (
        {"cache": {"maxEntries": 0}, "servers": []},
        ["cache.maxEntries: 0 is not allowed: must be at least 1"],
    ),
    ({"appId": "", "servers": []}, ["appId: '' is not allowed: must not be empty"]),
    (
        {"headerTimeout": "0s", "servers": []},
        ["headerTimeout: 0s is not allowed: must be more than 0s"],
    ),
    (
        {"sharedCache": {"url": "http://r"}, "servers": []},
        ["sharedCache.url: expected a redis://, rediss:// or unix:// URL"],
    ),
    (
        {"maxRequestBytes": 1.5, "servers": []},
        ["maxRequestBytes: 1.5 is not a size: expected a size such as 64Ki or 1Mi"],
    ),
]


@pytest.mark.parametrize(("document", "lines"), BAD_FILES, ids=lambda v: repr(v)[:60])
def test_a_bad_file_is_refused_with_one_line_per_problem(
    document: dict[str, Any], lines: list[str]
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(yaml.safe_dump(document), environ={})
    assert refused.value.problems == lines
    assert str(refused.value) == "\n".join(lines)
    for line in lines:
        for internal in ("pydantic", "type=", "input_value", "Value error"):
            assert internal not in line


BAD_ENVIRONMENTS: list[tuple[dict[str, str], str]] = [
    (
        {"MCPCACHE_LISTEN_PORT": "http"},
        "MCPCACHE_LISTEN_PORT: 'http' is not allowed: use a port number from 0 to 65535",
    ),
    (
        {"MCPCACHE_METRICS_PORT": "99999"},
        "MCPCACHE_METRICS_PORT: '99999' is not allowed: use a port number from 0 to 65535",
    ),
    (
        {"MCPCACHE_CACHE_MAX_ENTRIES": "-3"},
        "MCPCACHE_CACHE_MAX_ENTRIES: '-3' is not allowed: use a whole number from 1",
    ),
    (
        {"MCPCACHE_CACHE_MAX_BYTES": "lots"},
        "MCPCACHE_CACHE_MAX_BYTES: 'lots' is not allowed: use a size such as 64Mi",
    ),
    (
        {"MCPCACHE_SHARED_CACHE_URL": "http://x"},
        "MCPCACHE_SHARED_CACHE_URL (sharedCache.url): expected a redis://, rediss:// or "
        "unix:// URL",
    ),
    (
        {"MCPCACHE_SHARED_CACHE_URL": "redis://r", "MCPCACHE_SHARED_CACHE_TIMEOUT": "50"},
        "MCPCACHE_SHARED_CACHE_TIMEOUT (sharedCache.timeout): invalid duration '50': use a "
        "number and a unit, e.g. 30s, 5m, 1h30m",
    ),
]


@pytest.mark.parametrize(("environ", "line"), BAD_ENVIRONMENTS, ids=lambda v: repr(v)[:50])
def test_a_bad_environment_value_is_named_by_its_variable(
    environ: dict[str, str], line: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config("servers: []", environ=environ)
    assert str(refused.value) == line


def test_a_zero_duration_needs_no_unit() -> None:
    config = parse_config(yaml.safe_dump(server(timeout=0)), environ={})
    assert config.servers[0].timeout == 0


def test_a_max_size_above_the_ceiling_is_clamped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="mcpcache.sidecar.config"):
        config = parse_config(yaml.safe_dump(cache(maxSize="2Mi")), environ={})
    assert config.servers[0].cache.effective_max_size == 1 << 20
    (record,) = [r for r in caplog.records if r.name == "mcpcache.sidecar.config"]
    assert record.getMessage() == "maxSize above the ceiling: clamped"
    assert (record.server, record.maxSize, record.applied) == ("docs", "2Mi", "1Mi")  # type: ignore[attr-defined]
