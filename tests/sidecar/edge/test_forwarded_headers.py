"""Request headers on their way upstream, seen by the upstream itself: a header the
client's `Connection` names is dropped with it, as are names with `_`; `Via` names this
sidecar."""

from __future__ import annotations

import uuid

from peers.clients import call_body, call_headers, post
from peers.sidecar import one_server


async def test_headers_named_by_connection_or_spelled_with_underscores_never_go_upstream(
    make_sidecar, echo_upstream
) -> None:
    peer, app = echo_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    marker = uuid.uuid4().hex
    headers = call_headers("t") | {
        "connection": "keep-alive, X-Hop-Note",
        "x-hop-note": "for-the-next-hop-only",
        "x_api_key": "underscored",
        "x-request-tag": marker,
    }
    response = await post(sidecar.url("s"), call_body(1, "t", {"q": marker}), headers)
    assert response.status_code == 200
    (seen,) = [h for h in peer.seen if h.get("x-request-tag") == marker]
    assert "x-hop-note" not in seen
    assert "x_api_key" not in seen
    assert "connection" not in seen or "x-hop-note" not in seen["connection"].lower()
    assert seen["via"].startswith("1.1 mcpcache-")
