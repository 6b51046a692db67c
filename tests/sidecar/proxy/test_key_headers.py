"""Which request headers are key material: every header the upstream receives, but for a
short list that cannot carry identity or change the answer and the server's
`ignoreHeaders` (fail closed). A header nobody listed — a gateway's identity assertion,
a client certificate, a user's address — separates users all the same."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpcache.sidecar.config import ConfigError, Server, parse_config
from mcpcache.sidecar.rules.key import callers
from mcpcache.sidecar.rules.policy.plan import Lookup, plan
from mcpcache.sidecar.rules.protocol.asked import Asked
from mcpcache.sidecar.rules.protocol.messages import read_message
from mcpcache.sidecar.rules.reading.headers import NOT_KEY_MATERIAL, forwarded
from peers.clients import call_body, call_headers, http_client, unique
from peers.echo import EchoUpstream, who_answered
from peers.serving import ServedApp
from peers.sidecar import RunningSidecar, one_server
from peers.typescript_sdk import TypeScriptServer, typescript_client_calls


def echo_sidecar(
    make_sidecar: Any, echo_upstream: tuple[EchoUpstream, ServedApp], **cache: Any
) -> Any:
    return make_sidecar(one_server(echo_upstream[1].base_url + "/mcp", name="echo", **cache))


async def call(
    sidecar: RunningSidecar, arguments: dict[str, Any], headers: Any = ()
) -> httpx.Response:
    sent = list(call_headers("t").items()) + list(headers)
    async with http_client(timeout=10) as http:
        body = httpx.Request("POST", "/", json=call_body(1, "t", arguments)).read()
        return await http.post(sidecar.url("echo"), content=body, headers=sent)


@pytest.mark.parametrize(
    "header",
    [
        "x-jwt-assertion",
        "x-forwarded-client-cert",
        "x-amzn-oidc-data",
        "x-goog-authenticated-user-email",
        "x-forwarded-email",
        "x-forwarded-for",
        "accept-language",
    ],
)
async def test_users_told_apart_by_a_header_nobody_listed_never_share_an_entry(
    make_sidecar, echo_upstream, header: str
) -> None:
    peer, _ = echo_upstream
    sidecar = echo_sidecar(make_sidecar, echo_upstream)
    arguments = {"q": unique()}
    await call(sidecar, arguments, [(header, "alice")])
    calls = peer.calls
    bob = await call(sidecar, arguments, [(header, "bob")])
    assert bob.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert peer.calls == calls + 1
    assert peer.seen[-1][header] == "bob"
    again = await call(sidecar, arguments, [(header, "alice")])
    assert again.headers["cache-status"] == "mcpcache; hit"


async def test_a_header_sent_twice_never_shares_an_entry_with_one_holding_both_values(
    make_sidecar, echo_upstream
) -> None:
    sidecar = echo_sidecar(make_sidecar, echo_upstream)
    arguments = {"q": unique()}
    twice = [("x-forwarded-for", "10.0.0.1"), ("x-forwarded-for", "10.0.0.2")]
    first = await call(sidecar, arguments, twice)
    assert first.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    joined = await call(sidecar, arguments, [("x-forwarded-for", "10.0.0.1, 10.0.0.2")])
    assert joined.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert (await call(sidecar, arguments, twice)).headers["cache-status"] == "mcpcache; hit"


async def test_trace_context_and_ignored_headers_leave_the_key(make_sidecar, echo_upstream) -> None:
    sidecar = echo_sidecar(make_sidecar, echo_upstream, ignoreHeaders=["X-Request-Id"])
    arguments = {"q": unique()}
    for n in range(3):
        headers = [
            ("x-request-id", unique()),
            ("traceparent", f"00-{unique()}-{unique()[:16]}-01"),
            ("tracestate", f"vendor={n}"),
        ]
        response = await call(sidecar, arguments, headers)
        expected = "mcpcache; fwd=miss; stored" if n == 0 else "mcpcache; hit"
        assert response.headers["cache-status"] == expected
    assert (
        sidecar.sample("mcpcache_keyed_header_misses_total", server="echo", header="x-request-id")
        == 0
    )


async def test_a_header_that_keeps_every_call_a_miss_is_counted_by_name(
    make_sidecar, echo_upstream
) -> None:
    sidecar = echo_sidecar(make_sidecar, echo_upstream)
    arguments = {"q": unique()}
    for _ in range(10):
        response = await call(sidecar, arguments, [("x-request-id", unique())])
        assert response.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    named = sidecar.sample(
        "mcpcache_keyed_header_misses_total", server="echo", header="x-request-id"
    )
    assert named == 3, "named from its eighth miss on (the first seven are 'other')"
    assert (
        sidecar.sample("mcpcache_keyed_header_misses_total", server="echo", header="authorization")
        == 0
    ), "identity headers are keyed by design and not counted"


async def test_names_sent_a_few_times_cannot_crowd_out_the_header_that_matters(
    make_sidecar, echo_upstream
) -> None:
    sidecar = echo_sidecar(make_sidecar, echo_upstream)
    junk = [(f"x-noise-{n}", "v") for n in range(40)]
    await call(sidecar, {"q": unique()}, junk)
    for _ in range(8):
        await call(sidecar, {"q": unique()}, [("x-request-id", unique())])
    async with http_client(timeout=5) as http:
        text = (await http.get(sidecar.metrics_url + "/metrics")).text
    names = {
        line.split('header="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if line.startswith("mcpcache_keyed_header_misses_total{")
    }
    assert {"other", "x-request-id"} <= names
    assert not any(name.startswith("x-noise-") for name in names)


def test_identity_and_protocol_headers_can_never_be_ignored() -> None:
    for name in ("Authorization", "cookie", "mcp-session-id", "MCP-Protocol-Version", "x-tenant"):
        text = (
            "servers: [{name: s, url: 'http://u/mcp', cache: {identityHeaders: "
            f"[authorization, x-tenant], ignoreHeaders: [{name}]}}}}]"
        )
        with pytest.raises(ConfigError, match="ignoreHeaders cannot name"):
            parse_config(text, environ={})


# The property: two callers who differ in any header outside the short list never share.

_NAME = st.from_regex(r"[a-z][a-z0-9!#$%&'*+.^`|~-]{0,30}", fullmatch=True).filter(
    lambda name: (
        forwarded(name)
        and name not in NOT_KEY_MATERIAL
        and name not in callers.ROUTING_HEADERS
        and name not in {"connection"}
    )
)
_VALUE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
_SERVER = Server.model_validate({"name": "s", "url": "http://u/mcp", "cache": {"enabled": True}})
_MESSAGE = read_message(
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}'
)


def _key(headers: dict[str, str], server: Server = _SERVER) -> str:
    decided = plan(Asked.of(server, _MESSAGE, headers), "app")
    assert isinstance(decided, Lookup)
    return decided.key


@settings(max_examples=300, deadline=None)
@given(name=_NAME, one=_VALUE, other=_VALUE, common=st.dictionaries(_NAME, _VALUE, max_size=4))
def test_callers_differing_in_any_unlisted_header_never_share_a_key(
    name: str, one: str, other: str, common: dict[str, str]
) -> None:
    common.pop(name, None)
    first, second = {**common, name: one}, {**common, name: other}
    assert (_key(first) == _key(second)) == (one == other)
    absent = dict(common)
    assert _key(first) != _key(absent)


@settings(max_examples=100, deadline=None)
@given(name=_NAME, one=_VALUE, other=_VALUE)
def test_a_header_the_server_ignores_never_splits_a_key(name: str, one: str, other: str) -> None:
    document = {"name": "s", "url": "http://u/mcp", "cache": {"enabled": True}}
    document["cache"]["ignoreHeaders"] = [name]  # type: ignore[index]
    try:
        server = Server.model_validate(document)
    except ValueError:
        return  # an identity header: refused, tested above
    assert _key({name: one}, server) == _key({name: other}, server)


# The SDK clients still get hits out of the box (the Python client's, in both eras, are
# in test_caching: test_second_identical_call_is_served_from_cache).


def test_the_typescript_sdk_client_gets_hits_out_of_the_box(
    make_sidecar, ts_server: TypeScriptServer, upstream
) -> None:
    for url, tool, arguments in (
        (ts_server.url, "echo", {"text": unique()}),
        (upstream[1].base_url + "/mcp", "echo", {"text": unique()}),
    ):
        sidecar = make_sidecar(one_server(url, name="s"))
        calls = typescript_client_calls(sidecar.url("s"), tool, arguments, 3)
        assert [c["cacheStatus"] for c in calls] == [
            "mcpcache; fwd=miss",
            "mcpcache; hit",
            "mcpcache; hit",
        ], calls
        assert len({c["text"] for c in calls}) == 1


async def test_what_the_echo_saw_is_what_was_keyed(make_sidecar, echo_upstream) -> None:
    """The key's header material is exactly the forwarded headers: one dropped by a
    `Connection` header never reaches the upstream, so it does not split the key."""
    peer, _ = echo_upstream
    sidecar = echo_sidecar(make_sidecar, echo_upstream)
    arguments = {"q": unique()}
    await call(sidecar, arguments, [("connection", "x-hop"), ("x-hop", "one")])
    assert "x-hop" not in peer.seen[-1]
    again = await call(sidecar, arguments, [("connection", "x-hop"), ("x-hop", "two")])
    assert again.headers["cache-status"] == "mcpcache; hit"
    assert who_answered(again.json())["arguments"] == arguments
