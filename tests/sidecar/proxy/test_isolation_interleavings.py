"""Isolation: credentials, callers and ids never cross, under random interleavings."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peers.clients import call_body, call_headers, http_client
from peers.serving import served
from peers.upstream import Upstream


async def test_authorization_goes_only_to_the_server_the_request_names(
    make_sidecar, json_upstream
) -> None:
    _, first = json_upstream
    other = Upstream()
    with served(other.app(json_response=True)) as second:
        sidecar = make_sidecar(
            {
                "servers": [
                    {"name": "a", "url": first.base_url + "/mcp"},
                    {"name": "b", "url": second.base_url + "/mcp"},
                ]
            }
        )
        async with http_client() as http:
            with_token = call_headers("headers") | {"authorization": "Bearer for-a-only"}
            seen_a = await http.post(
                sidecar.url("a"), json=call_body(1, "headers", {}), headers=with_token
            )
            seen_b = await http.post(
                sidecar.url("b"), json=call_body(2, "headers", {}), headers=call_headers("headers")
            )
        headers_a = json.loads(seen_a.json()["result"]["content"][0]["text"])
        headers_b = json.loads(seen_b.json()["result"]["content"][0]["text"])
    assert headers_a["authorization"] == "Bearer for-a-only"
    assert "authorization" not in headers_b


CALL = st.tuples(
    st.sampled_from(["alice", "bob", "carol", None]),  # end-user token
    st.sampled_from(["x", "y", "z"]),  # argument
    st.integers(min_value=0, max_value=2**31),  # request id
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(batches=st.lists(st.lists(CALL, min_size=1, max_size=12), min_size=1, max_size=4))
def no_answer_ever_carries_another_callers_result_or_id(sidecar, batches) -> None:
    run = uuid.uuid4().hex[:8]
    answered: set[tuple[str | None, str]] = set()  # stored in an earlier batch: repeats hit

    async def one(
        http: httpx.AsyncClient, token: str | None, argument: str, request_id: int
    ) -> None:
        headers = call_headers("whoami")
        if token:
            headers["authorization"] = f"Bearer {token}"
        body = call_body(request_id, "whoami", {"text": f"{run}-{argument}"})
        response = await http.post(sidecar.url("json"), json=body, headers=headers)
        answer = response.json()
        assert answer["id"] == request_id
        text = answer["result"]["content"][0]["text"]
        user = f"Bearer {token}" if token else "anonymous"
        assert text.startswith(f"user={user} text={run}-{argument} #")
        if (token, argument) in answered:
            assert response.headers["cache-status"] == "mcpcache; hit"

    async def main() -> None:
        async with http_client(timeout=30) as http:
            for batch in batches:
                await asyncio.gather(*(one(http, *call) for call in batch))
                answered.update((token, argument) for token, argument, _ in batch)

    asyncio.run(main())


def test_no_answer_ever_carries_another_callers_result_or_id(sidecar) -> None:
    no_answer_ever_carries_another_callers_result_or_id(sidecar)
    # The property must have been exercised on hits, or it proves nothing.
    hits = sidecar.sample(
        "mcpcache_requests_total", server="json", method="tools/call", outcome="hit"
    )
    assert hits > 0
