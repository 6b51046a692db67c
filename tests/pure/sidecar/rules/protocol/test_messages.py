"""MCP message rules as pure functions: reading a request (each doubt that sends it
upstream uncached), the routing headers, judging a final response, and framing a
stored result under the caller's id."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpcache.sidecar.rules.protocol.messages import (
    Message,
    decode_header_value,
    method_label,
    read_message,
    routing_header_mismatch,
)
from mcpcache.sidecar.rules.protocol.results import (
    Verdict,
    cache_scope,
    frame_event,
    frame_response,
    is_server_request,
    judge_response,
)
from mcpcache.sidecar.rules.reading.body import Spelling
from mcpcache.sidecar.rules.reading.numbers import _number_shapes, has_inexact_number


def encoded(body: Any) -> bytes:
    return orjson.dumps(body)


def test_a_message_built_without_its_bytes_has_none() -> None:
    assert Message({"jsonrpc": "2.0", "method": "ping"}).raw == b""


@pytest.mark.parametrize(
    ("extra", "doubt", "kept"),
    [
        ({"Method": "tools/list"}, "ambiguous_name", None),  # `method` to Go's reader
        ({"ID": 2}, "ambiguous_name", None),
        ({"zz": 1, "Aa": 2}, None, {"zz": 1, "Aa": 2}),
        ({"m" * 100: 1}, None, {"m" * 100: 1}),
    ],
)
def test_a_member_json_rpc_does_not_define_is_key_material_unless_it_folds_to_one(
    extra: dict[str, Any], doubt: str | None, kept: dict[str, Any] | None
) -> None:
    message = read_message(encoded({"jsonrpc": "2.0", "id": 1, "method": "ping", **extra}))
    assert (message.doubt, message.extra) == (doubt, kept)
    assert message.is_request is (doubt is None)


@pytest.mark.parametrize(
    ("result", "scope"),
    [
        ({"cacheScope": "public"}, "public"),
        ({"cacheScope": "private"}, "private"),
        ({"cacheScope": "shared"}, None),
        ({"cacheScope": 1}, None),
        ({"CacheScope": "public"}, None),
        ({}, None),
    ],
)
def test_a_results_own_cache_scope_counts_only_as_the_protocol_spells_it(
    result: dict[str, Any], scope: str | None
) -> None:
    assert cache_scope(result) == scope
    verdict = judge_response({"jsonrpc": "2.0", "id": 1, "result": {"content": [], **result}})
    assert (verdict.reason, verdict.scope) == (None, scope)
    assert verdict.layout is not None  # a hit writes into the stored bytes without parsing


def test_a_request_is_read_once_into_its_fields() -> None:
    raw = encoded({"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"name": "t"}})
    message = read_message(raw)
    assert (message.method, message.id, message.is_request) == ("tools/call", "a", True)
    assert message.doubt is None
    assert message.params == {"name": "t"}
    assert message.raw == raw
    assert message.body["params"] is message.params


@pytest.mark.parametrize(
    ("body", "method", "request_id", "is_request", "params"),
    [
        ({"jsonrpc": "2.0", "method": "notifications/x"}, "notifications/x", None, False, {}),
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, "ping", None, True, {}),
        ({"jsonrpc": "2.0", "id": 3, "result": {}}, None, 3, False, {}),
        ({"jsonrpc": "2.0", "id": 3, "method": 5}, None, 3, False, {}),
        ({"jsonrpc": "2.0", "id": 3, "method": "m", "params": [1]}, "m", 3, True, {}),
    ],
)
def test_notifications_responses_and_odd_params(
    body: dict[str, Any], method: str | None, request_id: Any, is_request: bool, params: dict
) -> None:
    message = Message(body)
    assert (message.method, message.id, message.is_request, message.params) == (
        method,
        request_id,
        is_request,
        params,
    )


@pytest.mark.parametrize(
    ("raw", "doubt"),
    [
        (b"{nope", "unreadable"),
        (b"[]", "batch"),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', "batch"),
        (b'"text"', "unreadable"),
        (b'{"id": 1, "method": "ping"}', "unreadable"),
        (b'{"jsonrpc": "1.0", "id": 1}', "unreadable"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": 7}', "unreadable"),
        (b'{"jsonrpc": "2.0", "id": true, "method": "m"}', "unreadable"),
        (b'{"jsonrpc": "2.0", "id": [1], "method": "m"}', "unreadable"),
        (b'{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "m"}', "ambiguous_name"),
        (b'\xff{"jsonrpc": "2.0"}', "unreadable"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"n": NaN}}', "unreadable"),
    ],
)
def test_what_the_sidecar_cannot_read_as_one_message_is_unread_but_kept(
    raw: bytes, doubt: str
) -> None:
    message = read_message(raw)
    assert (message.doubt, message.method, message.is_request) == (doubt, None, False)
    assert message.raw == raw


def test_an_id_spelt_otherwise_than_its_value_is_a_request_in_doubt() -> None:
    message = read_message(b'{"jsonrpc": "2.0", "id": 1.0e0, "method": "m"}')
    assert (message.doubt, message.is_request) == ("unreadable", True)
    assert message.id == Spelling("1.0e0")


@pytest.mark.parametrize(
    ("raw", "doubt"),
    [
        (b'{"jsonrpc": "2.0", "id": 1, "method": "m", "params": 5}', "unreadable"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "m", "params": null}', "unreadable"),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": ["x"]}',
            "positional_params",
        ),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}}',
            "unreadable",
        ),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {}}', "unreadable"),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","Name":"b"}}',
            "ambiguous_name",
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}',
            "ambiguous_name",
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"x":1,"X":2}}}',
            "ambiguous_name",
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","Task":{}}}',
            "ambiguous_name",
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","Arguments":{}}}',
            "ambiguous_name",
        ),
    ],
)
def test_a_request_whose_params_are_in_doubt_keeps_its_method_and_id(
    raw: bytes, doubt: str
) -> None:
    message = read_message(raw)
    assert (message.doubt, message.id, message.is_request) == (doubt, 1, True)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}',
        b'{"jsonrpc": "2.0", "id": null, "method": "ping"}',
        b'{"jsonrpc": "2.0", "method": "tools/call", "params": {}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": {}}',
        b'{"jsonrpc": "2.0", "id": "x", "result": {}}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"h":{"Accept":1,"accept":2}}}}',
    ],
)
def test_what_the_sidecar_reads_with_certainty_has_no_doubt(raw: bytes) -> None:
    message = read_message(raw)
    assert (message.doubt, message.raw) == (None, raw)


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


@pytest.mark.parametrize(
    ("value", "decoded"),
    [
        (b64("café"), "café"),
        ("plain", "plain"),
        ("=?base64?not base64!?=", "=?base64?not base64!?="),
        ("=?base64?e A==?=", "=?base64?e A==?="),
        ("=?base64?" + base64.b64encode(b"\xff").decode() + "?=", "=?base64?/w==?="),
        ("=?base64?" + base64.b64encode(b"x").decode(), "=?base64?eA=="),
        (base64.b64encode(b"x").decode() + "?=", "eA==?="),
    ],
)
def test_base64_header_values_are_decoded_only_when_whole_and_valid(
    value: str, decoded: str
) -> None:
    assert decode_header_value(value) == decoded


def call(method: str = "tools/call", **params: Any) -> Message:
    return Message({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


@pytest.mark.parametrize(
    ("headers", "message", "problem"),
    [
        ({}, call(name="t"), None),
        ({"mcp-method": "tools/call", "mcp-name": "t"}, call(name="t"), None),
        ({"mcp-name": b64("tööl")}, call(name="tööl"), None),
        ({"mcp-name": "anything"}, call("tools/list"), None),
        (
            {"mcp-method": "tools/list"},
            call(name="t"),
            "Mcp-Method header does not match the request body's method",
        ),
        (
            {"mcp-name": "other"},
            call(name="t"),
            "Mcp-Name header does not match the request body's 'name' parameter",
        ),
        (
            {"mcp-name": "doc://b"},
            call("resources/read", uri="doc://a"),
            "Mcp-Name header does not match the request body's 'uri' parameter",
        ),
        ({"mcp-name": "doc://a"}, call("resources/read", uri="doc://a"), None),
        ({"mcp-name": "g"}, call("prompts/get", name="g"), None),
    ],
)
def test_routing_headers_must_agree_with_the_body(
    headers: dict[str, str], message: Message, problem: str | None
) -> None:
    assert routing_header_mismatch(headers, message) == problem


@pytest.mark.parametrize(
    ("copies", "problem"),
    [
        ([("mcp-method", "tools/call"), ("mcp-method", "tools/call")], None),
        ([("mcp-name", "t"), ("mcp-name", b64("t"))], None),
        (
            [("mcp-method", "tools/call"), ("mcp-method", "tools/list")],
            "Mcp-Method header does not match the request body's method",
        ),
        (
            [("mcp-name", "other"), ("mcp-name", "t")],
            "Mcp-Name header does not match the request body's 'name' parameter",
        ),
    ],
)
def test_every_copy_of_a_repeated_routing_header_must_agree_with_the_body(
    copies: list[tuple[str, str]], problem: str | None
) -> None:
    joined: dict[str, str] = {}
    for name, value in copies:
        joined[name] = f"{joined[name]}, {value}" if name in joined else value
    assert routing_header_mismatch(joined, call(name="t"), copies) == problem


def test_method_labels_are_known_methods_or_other() -> None:
    assert method_label(None) == "response"
    assert method_label("tools/call") == "tools/call"
    assert method_label("tasks/cancel") == "tasks/cancel"
    assert method_label("x/unknown") == "other"


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        ({"error": {"code": 1, "message": "m"}}, "error"),
        ({"result": {}, "error": {"code": 1}}, "error"),
        ({}, "error"),
        ({"result": [1]}, "error"),
        ({"result": {"isError": True}}, "tool_error"),
        ({"result": {"resultType": "input_required"}}, "input_required"),
        ({"result": {"resultType": "task"}}, "task"),
        ({"result": {"task": {"id": "t"}}}, "task"),
        ({"result": {"resultType": "partial"}}, "incomplete"),
        ({"result": {"ttlMs": 0}}, "ttl_zero"),
        ({"result": {"ttlMs": -1}}, "ttl_zero"),
    ],
)
def test_answers_that_are_not_a_complete_success_are_not_stored(
    response: dict[str, Any], reason: str
) -> None:
    assert judge_response(response) == Verdict(reason)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("result", "ttl_cap"),
    [
        ({"content": []}, None),
        ({"isError": False}, None),
        ({"isError": "true"}, None),
        ({"resultType": "complete", "content": []}, None),
        ({"ttlMs": 1500}, 1.5),
        ({"ttlMs": 1}, 0.001),
        ({"ttlMs": 250.0}, 0.25),
        ({"ttlMs": True}, None),
        ({"ttlMs": "100"}, None),
    ],
)
def test_a_complete_success_is_stored_as_its_result_bytes(
    result: dict[str, Any], ttl_cap: float | None
) -> None:
    verdict = judge_response({"jsonrpc": "2.0", "id": 1, "result": result})
    assert (verdict.reason, verdict.ttl_cap) == (None, ttl_cap)
    assert orjson.loads(verdict.result) == result
    if "ttlMs" not in result and "content" not in result:
        assert verdict.result == orjson.dumps(result)
    if "content" in result:  # first after `_meta`, where a hit's note goes
        assert verdict.result.startswith(b'{"content":')


@pytest.mark.parametrize(
    ("raw", "inexact"),
    [
        (b'{"n": 12}', False),
        (b'{"n": 18446744073709551615}', False),
        (b'{"n": 18446744073709551616}', True),
        (b'{"n": -9223372036854775808}', False),
        (b'{"n": -9223372036854775809}', True),
        (b'{"n": 0.5000000000000000}', False),
        (b'{"n": 0.10000000000000000555}', True),
        (b'{"n": 12345678901234567.5}', True),
        (b'{"n": 12345678901234567e400}', True),
        (b'{"n": 1e-400}', True),
        (b'{"n": 2E+400}', True),
        (b'{"n": 1e308}', False),
        (b'{"n": 5e-324}', False),
        (b'{"n": 1.5e-07}', False),
        (b'{"s": "one e400 two"}', False),
        (b'{"s": "12345678901234567890123"}', False),
        (b'{"n": 12345678901234567890123', True),
        (b'{"id": "3e100", "key": "9f2e1004be7a4c1d8e0000000000000011"}', False),
        (b'{"s": ":1e400", "t": "[12345678901234567890"}', False),
        (b'{"a": [1, 1e400]}', True),
        (b'{"a": [\n\t1E+400]}', True),
        (b'{"a":[-12345678901234567890]}', True),
        (b'{"a":\r\n 0.10000000000000000555}', True),
        (b"1e400", True),
        (b" \n123456789012345678901", True),
        (b'{"pad": "' + b"x" * 70_000 + b'", "id": "3e100"}', False),
        (b'{"pad": "' + b"x" * 70_000 + b'", "n": 1e400}', True),
    ],
)
def test_numbers_a_parsed_message_cannot_hold_exactly(raw: bytes, inexact: bool) -> None:
    assert has_inexact_number(raw) is inexact


_NUMBER_TEXT = st.from_regex(
    r"-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?", fullmatch=True
)
_NUMBER = (
    _NUMBER_TEXT
    | st.floats(allow_nan=False, allow_infinity=False).map(lambda f: orjson.dumps(f).decode())
    | st.integers(-(2**70), 2**70).map(str)
)


@settings(max_examples=500, deadline=None)
@given(numbers=st.lists(_NUMBER, min_size=1, max_size=4), spaced=st.booleans())
def test_a_parsed_answer_given_beside_its_bytes_finds_the_numbers_the_bytes_alone_do(
    numbers: list[str], spaced: bool
) -> None:
    """The shortcut for a body orjson writes back as it is never hides a number the
    searches and the exact reading would find."""
    raw = (b", " if spaced else b",").join(n.encode() for n in numbers)
    raw = b'{"result":{"n":[' + raw + b"]}}"
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed = None  # past a double's range: the bytes alone decide
    assert has_inexact_number(raw, parsed) is has_inexact_number(raw)


@pytest.mark.parametrize(
    ("message", "asks"),
    [
        ({"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage"}, True),
        ({"jsonrpc": "2.0", "method": "notifications/progress"}, False),
        ({"jsonrpc": "2.0", "id": 1, "result": {}}, False),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, False),
    ],
)
def test_a_server_request_is_a_method_with_an_id(message: dict[str, Any], asks: bool) -> None:
    assert is_server_request(message) is asks


def test_a_stored_result_is_framed_under_the_callers_id() -> None:
    assert frame_response(7, b'{"a":1}') == b'{"jsonrpc":"2.0","id":7,"result":{"a":1}}'
    assert frame_response("x", b"{}") == b'{"jsonrpc":"2.0","id":"x","result":{}}'
    assert frame_response(None, b"{}", event=True) == (
        b'event: message\ndata: {"jsonrpc":"2.0","id":null,"result":{}}\n\n'
    )
    assert frame_event(b"{}") == b"event: message\ndata: {}\n\n"


def test_number_shapes_make_digits_and_dots_0_exponents_e_and_signs_minus() -> None:
    table = _number_shapes()
    assert len(table) == 256
    assert b"-12.5E+300 eX,x".translate(table) == b"-0000e-000 eX:x"
    assert b'[\t{"a":\r\n1}]'.translate(table) == b': {"a":  0}]'


_MEMBER_NAMES = ("jsonrpc", "id", "method", "params", "result", "error")
_PARAM_NAMES = ("name", "uri", "arguments", "_meta", "cursor", "task")
_Pairs = list[tuple[str, Any]]


def _object_text(pairs: _Pairs, spaced: bool) -> bytes:
    """An object written pair by pair (a name may come twice), compact or spaced."""
    sep, colon = (b", ", b": ") if spaced else (b",", b":")
    items = [
        orjson.dumps(name)
        + colon
        + (_object_text(value, spaced) if isinstance(value, list) else orjson.dumps(value))
        for name, value in pairs
    ]
    return b"{" + sep.join(items) + b"}"


def _folds_twice(names: list[str]) -> bool:
    return len({name.casefold() for name in names}) != len(names)


def _stands_for(names: list[str], defined: tuple[str, ...]) -> bool:
    """A name outside `defined` that a case-insensitive reader takes for one inside."""
    return any(n not in defined and n.casefold() in defined for n in names)


_NAME = st.sampled_from(["x", "X", "k", "\u212a", "s", "\u017f"])
_META = st.lists(
    st.tuples(_NAME | st.sampled_from(["progressToken", "progresstoken"]), st.integers(0, 3)),
    max_size=4,
)
_EXTRA_PARAMS = st.lists(
    st.tuples(
        st.sampled_from(
            ["Task", "_META", "Name", "Arguments", "cursor", "Cursor", "x", "X", "name"]
        ),
        st.integers(0, 3),
    ),
    max_size=3,
)
_EXTRA_MEMBERS = st.lists(
    st.tuples(st.sampled_from(["Method", "ID", "x", "X", "Params", "id"]), st.integers(0, 3)),
    max_size=2,
)


@settings(max_examples=400, deadline=None)
@given(
    meta=_META,
    arguments=st.lists(st.tuples(_NAME, st.integers(0, 3)), max_size=4),
    extra_params=_EXTRA_PARAMS,
    extra_members=_EXTRA_MEMBERS,
    spaced=st.booleans(),
)
def test_a_name_is_in_doubt_exactly_where_a_case_insensitive_reader_may_read_it_otherwise(
    meta: _Pairs, arguments: _Pairs, extra_params: _Pairs, extra_members: _Pairs, spaced: bool
) -> None:
    """Checked against every name, pair by pair, as the message was written: the fast
    reading (which leans on `reading.read` never handing back a `dict` that holds two
    names equal after case folding) finds doubt exactly where this slow one does."""
    params: _Pairs = [("name", "t"), ("arguments", arguments), ("_meta", meta), *extra_params]
    top: _Pairs = [("jsonrpc", "2.0"), ("id", 1), ("method", "tools/call"), ("params", params)]
    top += extra_members
    top_names, param_names = [n for n, _ in top], [n for n, _ in params]
    in_doubt = (
        _folds_twice(top_names)
        or _stands_for(top_names, _MEMBER_NAMES)
        or _folds_twice(param_names)
        or _stands_for(param_names, _PARAM_NAMES)
        or _folds_twice([n for n, _ in meta])
    )
    message = read_message(_object_text(top, spaced))
    assert message.doubt == ("ambiguous_name" if in_doubt else None)
