"""Which request bodies an upstream may read otherwise than the sidecar (pure)."""

from __future__ import annotations

import pytest

from mcpcache.sidecar.rules.ambiguity import ambiguity


@pytest.mark.parametrize(
    "raw",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":{"b":[{"c":1,"C":2}]}}}',
        b'{"jsonrpc":"2.0","id":1,"method":"x","params":{},"PARAMS":{}}',
        '{"jsonrpc":"2.0","id":1,"method":"x","params":{"s":1,"\u017f":2}}'.encode(),
        '{"jsonrpc":"2.0","id":1,"method":"x","params":{"k":1,"\u212a":2}}'.encode(),
        b'{"jsonrpc":"2.0","id":1,"method":"x","params":{},"extra":true}',
        b'{"jsonrpc":"2.0","id":1,"method":"x","params":' + b"[" * 5000 + b"]" * 5000 + b"}",
    ],
)
def test_bodies_that_could_be_read_two_ways_are_refused_with_a_reason(raw: bytes) -> None:
    reason = ambiguity(raw)
    assert reason is not None
    assert "twice" in reason or "JSON-RPC does not define" in reason or "deeply" in reason


@pytest.mark.parametrize(
    "raw",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{}}}',
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
        b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":{"b":1},"c":{"b":2}}}',
        b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"name":"A","arguments":{"n":"N"}}}',
    ],
)
def test_bodies_with_one_reading_pass(raw: bytes) -> None:
    assert ambiguity(raw) is None
