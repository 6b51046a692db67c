"""Who an entry for every caller answers: only authorization contexts the upstream
itself answered lately (an empty or scheme-only credential, and none, are contexts like
any other); any other goes upstream first, and is refused there if the upstream refuses
it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mcpcache.sidecar.rules.key.callers import credential_in
from peers.clients import ask, call_body, call_headers, http_client, unique
from peers.recorder import Recorder, said
from peers.serving import ServedApp, async_wait_until, served
from peers.sidecar import RunningSidecar, one_server

GOOD = ("Bearer alice-token", "Bearer bob-token")


@pytest.fixture
def guarded() -> Iterator[tuple[Recorder, ServedApp]]:
    """An upstream that serves only the two good tokens (a 401 to anything else)."""
    peer = Recorder(accepted=frozenset(GOOD))
    with served(peer, lifespan="off") as app:
        yield peer, app


@pytest.fixture
def open_upstream() -> Iterator[tuple[Recorder, ServedApp]]:
    peer = Recorder()
    with served(peer, lifespan="off") as app:
        yield peer, app


def _public(make_sidecar, app: ServedApp) -> RunningSidecar:
    rules = [{"name": "t", "scope": "public"}]
    return make_sidecar(one_server(app.base_url + "/mcp", name="echo", tools=rules))


async def _call(sidecar: RunningSidecar, q: str, authorization: str | None, request_id: int = 1):
    headers = call_headers("t")
    if authorization is not None:
        headers["authorization"] = authorization
    async with http_client(timeout=10) as http:
        return await http.post(
            sidecar.url("echo"), json=call_body(request_id, "t", {"q": q}), headers=headers
        )


async def test_an_entry_for_every_caller_answers_only_credentials_the_upstream_accepted(
    make_sidecar, guarded
) -> None:
    peer, app = guarded
    sidecar = _public(make_sidecar, app)
    q = unique()
    first = await _call(sidecar, q, GOOD[0])
    assert first.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    again = await _call(sidecar, q, GOOD[0], 2)
    assert again.headers["cache-status"] == "mcpcache; hit; detail=public"
    calls = peer.calls
    junk = await _call(sidecar, q, "Bearer junk", 3)
    assert junk.status_code == 401  # the upstream's own refusal, not the entry
    assert peer.calls == calls + 1
    assert peer.received[-1].headers["authorization"] == "Bearer junk"
    junk_again = await _call(sidecar, q, "Bearer junk", 4)
    assert junk_again.status_code == 401
    bob = await _call(sidecar, q, GOOD[1], 5)  # accepted upstream first, then filed
    assert bob.status_code == 200
    assert bob.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert said(bob)["call"] == peer.calls
    bob_again = await _call(sidecar, q, GOOD[1], 6)
    assert bob_again.headers["cache-status"] == "mcpcache; hit; detail=public"
    assert peer.calls == calls + 3


@pytest.mark.parametrize(
    ("name", "value", "held"),
    [
        ("authorization", None, False),
        ("authorization", "", False),
        ("authorization", " \t", False),
        ("authorization", "Bearer", False),
        ("authorization", " Bearer  ", False),
        ("proxy-authorization", "Basic", False),
        ("authorization", "Bearer x", True),
        ("authorization", "raw-token", True),
        ("x-api-key", " ", False),
        ("x-api-key", "Bearer", True),
    ],
)
def test_a_credential_is_a_non_blank_value_and_not_a_scheme_alone(
    name: str, value: str | None, held: bool
) -> None:
    assert credential_in(name, value) is held


@pytest.mark.parametrize("blank", ["", "Bearer", "bearer", "Basic"])
async def test_an_empty_or_scheme_only_credential_is_a_context_of_its_own(
    make_sidecar, open_upstream, blank: str
) -> None:
    peer, app = open_upstream
    sidecar = _public(make_sidecar, app)
    q = unique()
    anonymous = await _call(sidecar, q, None)
    assert anonymous.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    calls = peer.calls
    # The upstream sees another request (it may refuse `Bearer` alone and serve no
    # header at all): it answers this context itself before an entry for every caller
    # does.
    first = await _call(sidecar, q, blank, 2)
    assert first.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert peer.received[-1].headers.get("authorization") == blank
    hit = await _call(sidecar, q, blank, 3)
    assert hit.headers["cache-status"] == "mcpcache; hit; detail=public"
    assert peer.calls == calls + 1
    # The reverse: what an anonymous caller's answer is filed under never answers a
    # real credential, nor does an answer fetched with one reach the anonymous.
    token = await _call(sidecar, q, "Bearer alice-token", 4)
    assert token.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    other = unique()
    await _call(sidecar, other, "Bearer alice-token", 5)
    blank_after = await _call(sidecar, other, blank, 6)
    assert blank_after.headers["cache-status"] == "mcpcache; fwd=miss; stored"


SIGN_IN: dict[str, Any] = {
    "resultType": "input_required",
    "inputRequests": {
        "login": {
            "method": "elicitation/create",
            "params": {"mode": "url", "url": "https://idp.example/login", "message": "sign in"},
        }
    },
}
REFUSALS_IN_A_RESULT: dict[str, dict[str, Any] | None] = {
    "isError": None,  # the recorder's own: a backend's 401 reported as `isError`
    "input_required": SIGN_IN,
    "task": {"task": {"taskId": "t-1", "status": "working"}},
    "task_result_type": {"resultType": "task", "taskId": "t-1"},
    "unknown_result_type": {"resultType": "redirect", "content": []},
}


@pytest.mark.parametrize("kind", REFUSALS_IN_A_RESULT)
async def test_a_refusal_in_a_result_or_a_protocol_answer_accepts_no_credential(
    make_sidecar, kind: str
) -> None:
    # Servers that pass a caller's token on to a backend answer anyone at the protocol
    # level and report the backend's refusal in a result: `isError`, or a sign-in asked
    # for; a task handle or a result type of another kind is no answer to the call
    # either. Only the call's own answer shows that the upstream served the credential.
    refusal = REFUSALS_IN_A_RESULT[kind]
    peer = Recorder(accepted=frozenset(GOOD), refuse_in_result=True, refused_result=refusal)
    with served(peer, lifespan="off") as app:
        sidecar = _public(make_sidecar, app)
        q = unique()
        await _call(sidecar, q, GOOD[0])
        assert (
            (await _call(sidecar, q, GOOD[0], 2))
            .headers["cache-status"]
            .startswith("mcpcache; hit")
        )
        refused = await _call(sidecar, unique(), "Bearer junk", 3)  # a 200, not an answer
        assert refused.status_code == 200
        await ask(sidecar.url("echo"), "tools/list", 4, "Bearer junk")
        calls = peer.calls
        junk = await _call(sidecar, q, "Bearer junk", 5)
        assert "hit" not in junk.headers["cache-status"], "the upstream's answer, not the entry"
        assert junk.json()["result"] == (refusal or refused.json()["result"])
        assert peer.calls == calls + 1
        assert peer.received[-1].headers["authorization"] == "Bearer junk"


async def test_an_unchecked_credential_never_gets_a_stale_answer_for_every_caller(
    make_sidecar, guarded
) -> None:
    peer, app = guarded
    rules = [{"name": "t", "scope": "public"}]
    document = one_server(
        app.base_url + "/mcp", name="echo", tools=rules, ttl="1s", staleIfError="10m"
    )
    sidecar = make_sidecar(document)
    q = unique()
    await _call(sidecar, q, GOOD[0])
    (entry,) = sidecar.sidecar.cache.values()
    clock = sidecar.sidecar.cache.timer
    await async_wait_until(lambda: clock() >= entry.expires_at, what="the entry to expire")
    peer.status = 503
    checked = await _call(sidecar, q, GOOD[0], 2)
    assert checked.headers["cache-status"].startswith("mcpcache; fwd=stale")
    junk = await _call(sidecar, q, "Bearer junk", 3)
    assert junk.status_code == 401, "the upstream's refusal, not the stale entry"
