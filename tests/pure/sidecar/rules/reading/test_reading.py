"""Reading a request body with certainty, and what the key and the rules make of what
cannot be read one way only (pure)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpcache.sidecar.config import Server, ToolRule, value_text
from mcpcache.sidecar.rules.invalidation.removals import argument_digests, removals
from mcpcache.sidecar.rules.key.cache_key import cache_key
from mcpcache.sidecar.rules.policy.arguments import skipped
from mcpcache.sidecar.rules.policy.plan import Bypass, Lookup, plan
from mcpcache.sidecar.rules.protocol.asked import Asked
from mcpcache.sidecar.rules.protocol.messages import read_message
from mcpcache.sidecar.rules.reading.arguments import doubtful
from mcpcache.sidecar.rules.reading.body import (
    Members,
    Spelling,
    Unreadable,
    folded_twice,
    read,
    read_exactly,
)


@pytest.mark.parametrize(
    ("names", "twice"),
    [
        (["name", "Name"], "Name"),
        (["s", "\u017f"], "\u017f"),
        (["k", "\u212a"], "\u212a"),
        (["a", "b", "a"], "a"),
        (["a", "b"], None),
        ([], None),
    ],
)
def test_names_equal_after_case_folding_are_found(names: list[str], twice: str | None) -> None:
    assert folded_twice(names) == twice


def test_compact_json_is_read_by_the_fast_path_as_it_is() -> None:
    raw = b'{"jsonrpc":"2.0","id":1,"params":{"n":1.5,"m":7,"s":"\xc3\xa9"}}'
    assert read(raw) == {"jsonrpc": "2.0", "id": 1, "params": {"n": 1.5, "m": 7, "s": "é"}}


@pytest.mark.parametrize(
    ("number", "kept"),
    [
        (b"1.00", Spelling("1.00")),
        (b"1e2", Spelling("1e2")),
        (b"1E+2", Spelling("1E+2")),
        (b"-0", Spelling("-0")),
        (b"18446744073709551617", Spelling("18446744073709551617")),
        (b"1e400", Spelling("1e400")),
        (b"0.10000000000000000555", Spelling("0.10000000000000000555")),
        (b"1.5", 1.5),
        (b"7", 7),
        (b"-7", -7),
        (b"100.0", 100.0),
    ],
)
def test_a_number_keeps_its_spelling_when_its_value_would_not(number: bytes, kept: Any) -> None:
    assert read(b'{"n": ' + number + b"}") == {"n": kept}


def test_an_object_naming_a_member_twice_keeps_every_pair_in_order() -> None:
    value = read(b'{"a": {"x": 1, "y": 2, "x": 3}}')
    assert value == {"a": Members([("x", 1), ("y", 2), ("x", 3)])}


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":{"Query":"a","query":"b"}}',  # compact, so the fast path reads it first
        b'{"a":{"K":1,"\xe2\x84\xaa":2}}',  # the Kelvin sign folds to k
        b'{"a":{"Qu\\u0065ry":"a","query":"b"}}',
        b'{"a": {"s": 1, "\\u017f": 2}}',
    ],
)
def test_an_object_with_names_equal_after_case_folding_keeps_its_pairs_in_order(
    raw: bytes,
) -> None:
    assert isinstance(read(raw)["a"], Members)


def test_names_equal_after_folding_in_different_objects_stay_plain_objects() -> None:
    assert read(b'{"a":{"Name":1},"b":{"name":2}}') == {"a": {"Name": 1}, "b": {"name": 2}}


def _key_text(value: Any) -> str:
    return cache_key("s", "tools/call", {"arguments": value}, "app", {})


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (b'{"n": 1.0}', b'{"n": 1.00}'),
        (b'{"n": 100.0}', b'{"n": 1e2}'),
        (b'{"n": 0}', b'{"n": -0}'),
        (b'{"n": 18446744073709551616}', b'{"n": 18446744073709551617}'),
        (b'{"x": 1, "x": 2}', b'{"x": 2}'),
        (b'{"x": 1, "x": 2}', b'{"x": 1}'),
        (b'{"x": 1, "x": 2}', b'{"x": 2, "x": 1}'),
        (b'{"x": {"y": 1, "y": 2}}', b'{"x": {"y": 2}}'),
        # Go matches names case aside, the last one winning: their order is the question.
        (b'{"Query": "a", "query": "b"}', b'{"query": "b", "Query": "a"}'),
        (b'{"q": {"K": 1, "\u212a": 2}}', b'{"q": {"\u212a": 2, "K": 1}}'),
        (b'{"q": "a", "Q": "c", "q": "b"}', b'{"q": "a", "q": "b", "Q": "c"}'),
    ],
)
def test_bodies_an_upstream_may_read_apart_never_write_the_same_key(
    one: bytes, other: bytes
) -> None:
    assert _key_text(read(one)) != _key_text(read(other))


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (b'{"n": 1.5, "s": "A"}', b'{ "s" : "\\u0041", "n" : 1.5 }'),
        (b'{"x": 1, "y": 2, "x": 3}', b'{"x":1 , "y":2, "x" :3}'),
        (b'{"a": {"b": 1, "c": 2}}', b'{"a": {"c": 2, "b": 1}}'),
    ],
)
def test_bodies_every_reader_reads_alike_write_the_same_key(one: bytes, other: bytes) -> None:
    assert _key_text(read(one)) == _key_text(read(other))


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{nope", "unreadable"),
        (b'{"n": NaN}', "unreadable"),
        (b'{"n": Infinity}', "unreadable"),
        (b'{"s": "\\ud800"}', "unreadable"),
        (b"\xff", "unreadable"),
        (b"[" * 300 + b"]" * 300, "too_deep"),
        (b"[" * 5000 + b"]" * 5000, "too_deep"),
    ],
)
def test_what_cannot_be_read_exactly_is_unreadable(raw: bytes, reason: str) -> None:
    with pytest.raises(Unreadable) as unread:
        read(raw)
    assert unread.value.reason == reason


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=_JSON, spaced=st.booleans())
def test_any_json_is_read_to_a_key_that_the_same_json_always_gets(value: Any, spaced: bool) -> None:
    import json

    raw = (
        json.dumps(value).encode()
        if spaced
        else orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    )
    read_once = _key_text(read(raw))
    assert read_once == _key_text(read(raw))


_CASED_JSON = st.recursive(
    st.integers(0, 3) | st.sampled_from(["v", "V"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["k", "K", "\u212a", "s", "S", "\u017f", "Ab", "aB"]), inner, max_size=4
        )
    ),
    max_leaves=10,
)


def _objects(value: Any) -> list[Any]:
    """Every object in `value`, `Members` and `dict` alike, the value's own first."""
    if isinstance(value, Members):
        return [value, *(o for _, item in value.pairs for o in _objects(item))]
    if isinstance(value, dict):
        return [value, *(o for item in value.values() for o in _objects(item))]
    if isinstance(value, list):
        return [o for item in value for o in _objects(item)]
    return []


@settings(max_examples=300, deadline=None)
@given(value=_CASED_JSON, spaced=st.booleans())
def test_no_object_read_as_a_dict_holds_two_names_equal_after_case_folding(
    value: Any, spaced: bool
) -> None:
    """What `read_message` leans on to check only names that stand alone: an object
    whose names fold together is always `Members`, whichever path read it."""
    import json

    raw = json.dumps(value).encode() if spaced else orjson.dumps(value)
    for found in _objects(read(raw)):
        if isinstance(found, dict):
            assert folded_twice(list(found)) is None
        else:
            assert folded_twice(found.names()) is not None


_SDK_LIKE_NAMES = st.sampled_from(
    [
        "io.modelcontextprotocol/protocolVersion",
        "io.modelcontextprotocol/protocolversion",
        "io.modelcontextprotocol/ProtocolVersion",
        "protocolVersion",
        "protocolversion",
        "PROTOCOLVERSION",
        'a"protocolVersion',
        'a"protocolversion',
        "a\\protocolVersion",
        "xprotocolVersion",
        "xprotocolversion",
        "Xprotocolversion",
        "clientCapabilities",
        "clientcapabilities",
        "progressToken",
        "progresstoken",
        "Token",
        "token",
        "k",
        "K",
    ]
)
_SDK_LIKE_JSON = st.recursive(
    st.integers(0, 3) | _SDK_LIKE_NAMES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_SDK_LIKE_NAMES, inner, max_size=4),
    max_leaves=10,
)


@settings(max_examples=500, deadline=None)
@given(value=st.dictionaries(_SDK_LIKE_NAMES, _SDK_LIKE_JSON, min_size=1, max_size=4))
def test_bodies_with_the_sdks_cased_names_are_read_as_the_exact_reading_reads_them(
    value: dict[str, Any],
) -> None:
    """The shortcut for the SDK's cased `_meta` names finds every pair of names equal
    after case folding that the exact reading keeps as `Members`, however a name ends."""
    raw = orjson.dumps(value)
    assert read(raw) == read_exactly(raw)


@pytest.mark.parametrize(
    ("arguments", "names", "doubt"),
    [
        ({"Accept": 1, "accept": 2}, {"q"}, False),  # free-form: both are key material
        (Members([("Accept", 1), ("accept", 2)]), {"q"}, False),
        (Members([("Accept", 1), ("accept", 2), ("q", 3)]), {"q"}, True),
        ({"Version": "1.0", "q": 1}, {"version"}, True),
        ({"version": "1.0"}, {"version"}, False),
        (Members([("q", 1), ("q", 2)]), {"q"}, True),
        (Members([("x", 1), ("x", 2)]), set(), False),
        ("not an object", {"q"}, False),
    ],
)
def test_argument_names_are_in_doubt_only_where_a_rule_reads_them(
    arguments: Any, names: set[str], doubt: bool
) -> None:
    assert doubtful(arguments, names) is doubt


def _message(arguments: bytes, name: bytes = b"get") -> Any:
    return read_message(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"'
        + name
        + b'","arguments":'
        + arguments
        + b"}}"
    )


_RULES = Server.model_validate(
    {
        "name": "s",
        "url": "http://u/mcp",
        "cache": {
            "enabled": True,
            "tools": [
                {"name": "get", "skipIf": {"version": "latest"}},
                {"name": "update", "invalidates": [{"tool": "get", "match": ["doc"]}]},
                {"name": "reset", "invalidates": ["list_*"]},
            ],
        },
    }
)


def _plan(message: Any) -> Bypass | Lookup:
    return plan(Asked(_RULES, message, {}, ()), "app")


def test_a_free_form_argument_object_with_case_variant_names_is_cached_and_keyed_whole() -> None:
    one = _plan(_message(b'{"doc":"a","headers":{"Accept":"x","accept":"y"}}'))
    other = _plan(_message(b'{"doc":"a","headers":{"Accept":"x"}}'))
    assert isinstance(one, Lookup)
    assert isinstance(other, Lookup)
    assert one.key != other.key


@pytest.mark.parametrize(
    "arguments",
    [b'{"doc":"a","Version":"latest"}', b'{"doc":"a","version":"1","version":"latest"}'],
)
def test_a_rule_named_argument_the_upstream_may_read_otherwise_steps_aside(
    arguments: bytes,
) -> None:
    decided = _plan(_message(arguments))
    assert isinstance(decided, Bypass)
    assert decided.reason == "ambiguous_name"


def test_a_write_whose_matched_argument_is_in_doubt_drops_every_entry_of_its_tools() -> None:
    certain = _plan(_message(b'{"doc":"a"}', b"update"))
    assert isinstance(certain, Bypass)
    assert certain.invalidates != ("get",)
    for arguments in (b'{"doc":"a","Doc":"b"}', b'{"doc":"a","doc":"b"}', b'{"doc":1e9999999999}'):
        decided = _plan(_message(arguments, b"update"))
        assert isinstance(decided, Bypass)
        assert decided.invalidates == ("get",)


@pytest.mark.parametrize(
    "raw",
    [
        b"{nope",
        b'[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"update"}}]',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get","Name":"update"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["update"]}',
        b'{"jsonrpc":"2.0","id":1,"Method":"tools/call","params":{"name":"update"}}',
    ],
)
def test_a_body_whose_tool_is_in_doubt_drops_everything_the_servers_rules_reach(
    raw: bytes,
) -> None:
    decided = _plan(read_message(raw))
    assert isinstance(decided, Bypass)
    assert decided.invalidates == ("get", "list_*")


def test_a_query_string_and_members_beyond_json_rpc_are_key_material() -> None:
    message = _message(b'{"doc":"a"}')
    plain = _plan(message)
    queried = plan(Asked(_RULES, message, {}, (), "api_key=1"), "app")
    other = plan(Asked(_RULES, message, {}, (), "api_key=2"), "app")
    extra = _plan(
        read_message(
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get",'
            b'"arguments":{"doc":"a"}},"tenant":"b"}'
        )
    )
    keys = {d.key for d in (plain, queried, other, extra) if isinstance(d, Lookup)}
    assert len(keys) == 4


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (7, "7"),
        (7, 7.0),
        (7, " 7"),
        (7, "7.0"),
        (7, "7e0"),
        (0, "0.0"),
        (0, " 0"),
        (0, -0.0),
        (True, 1),
        (True, "yes"),
        (True, "on"),
        (True, "True"),
        (False, "off"),
        (False, 0),
        (1, "1.00000000000000001"),  # one double to every parser that reads by double
        (0, "1e-400"),
        ("caf\u00e9", "cafe\u0301"),
        ("Latest", "latest"),
    ],
)
def test_values_a_lax_validator_reads_alike_compare_equal(one: Any, other: Any) -> None:
    assert value_text(one) == value_text(other)


@pytest.mark.parametrize(("one", "other"), [(7, 8), ("a", "b"), (True, False), (0.1, 0.2)])
def test_different_values_compare_apart(one: Any, other: Any) -> None:
    assert value_text(one) != value_text(other)


def test_skip_if_steps_aside_for_lax_spellings_and_unsettled_numbers() -> None:
    rule = ToolRule.model_validate({"name": "get", "skipIf": {"force": True, "limit": 0}})
    for value in (1, "yes", "on", "1", "true", True):
        assert skipped(rule, {"force": value})
    for value in ("0.0", " 0", 0.0, Spelling("0e5"), Spelling("1e-400"), Spelling("1e400")):
        assert skipped(rule, {"limit": value})
    assert not skipped(rule, {"limit": 5, "force": "no"})


def test_a_match_compares_numbers_and_strings_by_value() -> None:
    rule = ToolRule.model_validate(
        {"name": "update", "invalidates": [{"tool": "get", "match": ["doc"]}]}
    )
    assert removals(rule, {"doc": 7}) == removals(rule, {"doc": "7.0"})
    assert removals(rule, {"doc": "caf\u00e9"}) == removals(rule, {"doc": "cafe\u0301"})
    assert removals(rule, {"doc": Spelling("7.00")}) == removals(rule, {"doc": 7})
    assert removals(rule, {"doc": Spelling("1.00000000000000001")}) == removals(rule, {"doc": 1})
    assert removals(rule, {"doc": {"n": Spelling("7.00")}}) == ("get",)


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


def test_names_after_a_string_value_are_walked_whatever_they_start_with() -> None:
    # `:a` beside `:A` after a string value: one member to Go, the last one winning.
    one = read(b'{"q":"v",":a":1,":A":2}')
    other = read(b'{"q":"v",":A":2,":a":1}')
    assert isinstance(one, Members)
    assert _key_text(one) != _key_text(other)


@pytest.mark.timeout(30)  # a reading quadratic in such a string took minutes here
def test_a_long_run_of_escaped_quotes_is_read() -> None:
    raw = b'{"a":{"Q":"' + b'\\"' * 400_000 + b'"}}'
    assert read(raw) == {"a": {"Q": '"' * 400_000}}
