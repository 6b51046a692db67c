"""What a changed config file does to a running sidecar: the caller's app id, the limits
and the servers take effect at once, listeners, budget and allowed hosts only at the next
start; a kubelet-style symlink swap is noticed; no change flushes the cache."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from peers.clients import as_upstream_said, call_body, call_headers, post, unique
from peers.echo import who_answered
from peers.serving import async_wait_until
from peers.sidecar import RunningSidecar, one_server


async def ask(sidecar: RunningSidecar, arguments: dict[str, Any], request_id: Any = 1, **headers):
    return await post(
        sidecar.url("s"), call_body(request_id, "t", arguments), call_headers("t", **headers)
    )


async def reloaded(sidecar: RunningSidecar, document: dict[str, Any], applied: float) -> None:
    """Write `document` and wait until the sidecar has applied it."""
    sidecar.write_config(document)
    await async_wait_until(
        lambda: sidecar.sample("mcpcache_config_reloads_total", result="applied") == applied,
        what="the reload to be applied",
    )


@pytest.mark.slow
async def test_callers_with_different_app_ids_never_share_an_entry_in_one_cache(
    make_sidecar, echo_upstream
) -> None:
    """One sidecar, one cache: only the app id changes between the callers (through a
    reload), so only the key can keep them apart."""
    peer, app = echo_upstream
    document = one_server(app.base_url + "/mcp") | {"appId": "agent-one"}
    sidecar = make_sidecar(document)
    arguments = {"q": unique()}
    before = peer.calls
    first = await ask(sidecar, arguments, 1)
    assert first.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert (await ask(sidecar, arguments, 2)).headers["cache-status"] == "mcpcache; hit"

    await reloaded(sidecar, document | {"appId": "agent-two"}, applied=1)
    other = await ask(sidecar, arguments, 3)
    assert other.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert who_answered(other.json())["call"] != who_answered(first.json())["call"]
    assert peer.calls == before + 2
    assert len(sidecar.sidecar.cache) == 2, "both callers' entries are kept side by side"

    await reloaded(sidecar, document, applied=2)
    back = await ask(sidecar, arguments, 4)
    assert back.headers["cache-status"] == "mcpcache; hit", "the first caller's entry is intact"
    assert as_upstream_said(back.json()["result"]) == first.json()["result"]


@pytest.mark.slow
async def test_limits_change_live_but_listeners_budget_and_hosts_wait_for_a_restart(
    make_sidecar, echo_upstream, caplog
) -> None:
    _, app = echo_upstream
    document = one_server(app.base_url + "/mcp")
    sidecar = make_sidecar(document)
    padded = {"q": unique(), "pad": "x" * 3000}
    assert (await ask(sidecar, padded)).status_code == 200
    assert (await ask(sidecar, {"q": unique()}, **{"x-pad": "y" * 3000})).status_code == 200

    changed = document | {
        "maxRequestBytes": "2Ki",
        "maxHeaderBytes": "2Ki",
        "cache": {"maxEntries": 1},
        "allowedHosts": ["agent.example"],
        "listen": {"host": "127.0.0.1", "port": 1},
    }
    with caplog.at_level(logging.WARNING, logger="mcpcache.sidecar.config"):
        await reloaded(sidecar, changed, applied=1)
    assert (await ask(sidecar, padded, 2)).status_code == 413, "maxRequestBytes is live"
    too_long = await ask(sidecar, {"q": unique()}, 3, **{"x-pad": "y" * 3000})
    assert too_long.status_code == 431, "maxHeaderBytes is live"

    foreign = await ask(sidecar, {"q": unique()}, 4, host="agent.example")
    assert foreign.status_code == 403, "allowedHosts waits for a restart"
    for n in range(3):
        assert (await ask(sidecar, {"q": unique()}, 5 + n)).status_code == 200
    assert sidecar.sample("mcpcache_cache_max_entries") == 1024, "the budget too"
    assert len(sidecar.sidecar.cache) == 5, "maxEntries 1 was not applied"
    restart_only = {
        r.field for r in caplog.records if r.getMessage().startswith("configuration field")
    }
    assert restart_only == {"listen", "cache", "allowed_hosts"}


@pytest.mark.slow
async def test_a_kubelet_style_symlink_swap_is_reloaded(make_sidecar, echo_upstream) -> None:
    """The mounted file's name stays a symlink through `..data`; only its target moves."""
    _, app = echo_upstream
    first = one_server(app.base_url + "/mcp")
    sidecar = make_sidecar(first, projected=True)
    assert sidecar.config_path.is_symlink()
    arguments = {"q": unique()}
    assert (await ask(sidecar, arguments)).headers["cache-status"].endswith("stored")

    second = {"servers": [*first["servers"], {"name": "b", "url": app.base_url + "/mcp"}]}
    await reloaded(sidecar, second, applied=1)
    routed = await post(sidecar.url("b"), call_body(1, "t", arguments), call_headers("t"))
    assert routed.status_code == 200
    assert routed.headers["cache-status"] == "mcpcache; fwd=bypass"
    assert (await ask(sidecar, arguments, 2)).headers["cache-status"] == "mcpcache; hit"
