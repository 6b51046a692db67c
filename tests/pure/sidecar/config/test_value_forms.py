"""Durations, sizes and the config file's own rules, to the exact words and forms: the
environment's overrides, the servers file, the loop check and the file form."""

from __future__ import annotations

import logging

import pytest
import yaml

from mcpcache.sidecar.config import (
    ConfigError,
    SidecarConfig,
    dump_servers,
    parse_config,
    parse_servers_file,
)
from mcpcache.sidecar.config.units import format_duration, parse_duration, parse_quantity

SERVER = {"name": "docs", "url": "http://docs.tools.svc:8000/mcp"}


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.25, "250ms"), (0.001, "1ms"), (60, "1m"), (90, "1m30s"), (3600, "1h")],
)
def test_durations_are_written_in_their_shortest_go_form(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert format_duration(3661) == "1h1m1s"


def test_refusals_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"^invalid duration '1\.2\.3s': use a number"):
        parse_duration("1.2.3s")
    with pytest.raises(ValueError, match=r"^invalid quantity -1: must not be negative$"):
        parse_quantity(-1)
    assert parse_quantity(0) == 0


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ({"servers": [SERVER | {"timeout": True}]}, "expected a duration such as 30s or 5m"),
        ({"servers": [SERVER | {"timeout": -1}]}, "must not be negative"),
        ({"maxRequestBytes": 1.5, "servers": []}, "expected a size such as 64Ki or 1Mi"),
        ({"maxRequestBytes": True, "servers": []}, "expected a size such as 64Ki or 1Mi"),
    ],
)
def test_values_of_the_wrong_kind_are_refused_with_a_reason(document: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_config(yaml.safe_dump(document), environ={})


def test_a_zero_timeout_is_a_value_not_a_refusal() -> None:
    config = parse_config(yaml.safe_dump({"servers": [SERVER | {"timeout": 0}]}), environ={})
    assert config.servers[0].timeout == 0


def test_the_top_level_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match=r"^the top level must be a mapping$"):
        parse_config("[1, 2]", environ={})
    with pytest.raises(ConfigError, match="servers") as empty:
        parse_config("", environ={})
    assert "mapping" not in str(empty.value), "an empty file is an empty mapping"


def test_the_metrics_host_comes_from_the_environment() -> None:
    config = parse_config("servers: []", environ={"MCPCACHE_METRICS_HOST": "10.0.0.7"})
    assert (config.metrics.host, config.metrics.port) == ("10.0.0.7", 9090)
    plain = parse_config("servers: []", environ={})
    assert plain.with_environment({}) is plain


@pytest.mark.parametrize(
    ("url", "listen", "loops"),
    [
        ("https://localhost/mcp", 443, True),
        ("http://localhost/mcp", 80, True),
        ("http://localhost/mcp", 443, False),
        ("https://127.0.0.1/mcp", 80, False),
        ("http://127.0.0.1:3500/mcp", 3500, True),
    ],
)
def test_a_server_on_the_sidecars_own_port_is_refused_default_ports_included(
    url: str, listen: int, loops: bool
) -> None:
    config = SidecarConfig.model_validate(
        {"listen": {"host": "127.0.0.1", "port": listen}, "servers": [{"name": "s", "url": url}]}
    )
    if loops:
        with pytest.raises(ValueError, match="points at the sidecar's own listener"):
            config.check_not_self()
    else:
        config.check_not_self()


def test_the_file_form_has_strings_for_values_and_no_empty_fields() -> None:
    document = parse_config(yaml.safe_dump({"servers": [SERVER]}), environ={}).to_document()
    (server,) = document["servers"]
    assert (server["name"], server["url"], server["timeout"]) == (
        "docs",
        "http://docs.tools.svc:8000/mcp",
        "30s",
    )
    cache = server["cache"]
    assert (cache["enabled"], cache["ttl"], cache["maxSize"]) == (False, "30s", "64Ki")
    assert cache["identityHeaders"] == [
        "authorization",
        "proxy-authorization",
        "cookie",
        "x-api-key",
    ]
    assert "metadataTTL" not in cache, "unset fields are left out, not written as null"
    assert document["maxRequestBytes"] == "4Mi"


def test_the_servers_file_takes_only_servers_and_names_the_rest(caplog) -> None:
    text = yaml.safe_dump({"servers": [SERVER], "appId": "x", "listen": {"port": 1}})
    with caplog.at_level(logging.WARNING, logger="mcpcache.sidecar.config"):
        config = parse_servers_file(text, environ={"MCPCACHE_APP_ID": "pod"})
    assert config.app_id == "pod"
    assert config.listen.port == 3500
    assert [s.name for s in config.servers] == ["docs"]
    (record,) = caplog.records
    assert record.getMessage() == (
        "servers file: keys other than 'servers' are ignored; set them on the "
        "sidecar's command line or environment"
    )
    assert record.ignored == ["appId", "listen"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mcpcache.sidecar.config"):
        parse_servers_file(yaml.safe_dump({"servers": []}), environ={})
    assert caplog.records == []


def test_dump_servers_writes_only_servers_in_the_file_form() -> None:
    config = parse_config(yaml.safe_dump({"servers": [SERVER]}), environ={})
    text = dump_servers(config.servers)
    assert list(yaml.safe_load(text)) == ["servers"]
    assert parse_servers_file(text, environ={}).servers == config.servers
    assert text.index("name:") < text.index("url:"), "field order kept"
