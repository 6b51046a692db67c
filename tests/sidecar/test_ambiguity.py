"""Which request bodies an upstream may read otherwise than the sidecar, and what goes
upstream instead (pure)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mcpcache.sidecar.config import ToolRule
from mcpcache.sidecar.rules.ambiguity import Ambiguous, folded_collision, upstream_body
from mcpcache.sidecar.rules.arguments import argument_digests, removals
from mcpcache.sidecar.rules.messages import MalformedMessage, parse_message
from mcpcache.sidecar.rules.numbers import has_inexact_number


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ({"name": "a", "Name": "b"}, "Name"),
        ({"a": {"b": [{"c": 1, "C": 2}]}}, "C"),
        ({"s": 1, "\u017f": 2}, "\u017f"),
        ({"k": 1, "\u212a": 2}, "\u212a"),
        ([[{"x": {"Y": 1, "y": 2}}]], "y"),
    ],
)
def test_names_equal_after_case_folding_are_found_at_any_depth(value: Any, name: str) -> None:
    assert folded_collision(value) == name


@pytest.mark.parametrize(
    "value",
    [{"name": "a", "arguments": {}}, {"a": {"b": 1}, "c": {"b": 2}}, [1, "A", {"a": "A"}], 3],
)
def test_values_with_one_reading_pass(value: Any) -> None:
    assert folded_collision(value) is None


def test_deep_nesting_is_walked_without_recursion() -> None:
    value: Any = {"a": 1, "A": 2}
    for _ in range(10_000):
        value = [value]
    assert folded_collision(value) == "A"


def test_the_upstream_gets_the_message_as_read() -> None:
    raw = b'{"jsonrpc":"2.0", "id":1,"method":"x","params":{"q":"secret","q":"x"}}'
    message = parse_message(raw)
    sent = upstream_body(message.body, message.raw)
    assert orjson.loads(sent) == message.body
    assert b"secret" not in sent


def test_a_body_the_parsed_message_cannot_hold_exactly_goes_as_written_if_unambiguous() -> None:
    raw = b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"n":18446744073709551617}}'
    message = parse_message(raw)
    assert upstream_body(message.body, message.raw) == raw
    for twice in (b'"n":1,"n":18446744073709551617', b'"n":1,"N":18446744073709551617'):
        raw = b'{"jsonrpc":"2.0","id":1,"method":"x","params":{' + twice + b"}}"
        message = parse_message(raw)
        with pytest.raises(Ambiguous, match="appears twice"):
            upstream_body(message.body, message.raw)


def test_a_body_with_two_names_equal_after_folding_is_ambiguous() -> None:
    message = parse_message(b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":1,"A":2}}')
    with pytest.raises(Ambiguous, match="'A' appears twice"):
        upstream_body(message.body, message.raw)


@pytest.mark.parametrize("extra", ["Method", "ID", "Params", "extra"])
def test_members_json_rpc_does_not_define_are_refused(extra: str) -> None:
    raw = b'{"jsonrpc":"2.0","id":1,"method":"x","params":{},"' + extra.encode() + b'":1}'
    with pytest.raises(MalformedMessage, match="is not a JSON-RPC member") as refused:
        parse_message(raw)
    assert refused.value.code == -32600


@pytest.mark.parametrize("number", [b"1e-9999999999999999999", b"0e9999999999999999999"])
def test_an_exponent_too_large_to_read_exactly_is_inexact_and_goes_as_written(
    number: bytes,
) -> None:
    raw = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":' + number + b"}}"
    assert has_inexact_number(raw)
    message = parse_message(raw)
    assert upstream_body(message.body, message.raw) == raw


def test_a_value_too_deep_to_digest_makes_a_write_remove_every_entry_of_its_tool() -> None:
    rule = ToolRule.model_validate(
        {"name": "update", "invalidates": [{"tool": "get", "match": ["doc"]}]}
    )
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    assert argument_digests(("doc",), {"doc": deep}) == (("doc", ""),)
    assert removals(rule, {"doc": deep}) == ("get",)
    (matched,) = removals(rule, {"doc": "a"})
    assert matched != "get"
