"""The policy's rules on argument values and on entries for every caller, as pure
functions: `skipIf`, argument digests and matched removals, certain schema defaults,
public keys, and what a public answer may be filed under or shared with."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from mcpcache.sidecar.cache.store import Scope
from mcpcache.sidecar.config import Server, ServerCache
from mcpcache.sidecar.rules.admission.sharing import filing, follower_share, scoped
from mcpcache.sidecar.rules.invalidation.removals import (
    MatchedRemoval,
    argument_digests,
    recorded_match,
)
from mcpcache.sidecar.rules.learned_tools import (
    MAX_CALLERS_PER_SERVER,
    LearnedTools,
    certain_defaults,
    listing_ttl,
)
from mcpcache.sidecar.rules.policy.plan import Bypass, Lookup, plan, public_side
from mcpcache.sidecar.rules.protocol.asked import Asked
from mcpcache.sidecar.rules.protocol.messages import Message, read_message
from mcpcache.sidecar.rules.protocol.results import Verdict

PROTOCOL = {"mcp-protocol-version": "2026-07-28"}


def server(**cache: Any) -> Server:
    return Server.model_validate(
        {"name": "s", "url": "http://u/mcp", "cache": {"enabled": True, **cache}}
    )


def call(tool: str, args: dict[str, Any] | None = None) -> Message:
    params: dict[str, Any] = {"name": tool}
    if args is not None:
        params["arguments"] = args
    return Message({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})


def read(uri: str) -> Message:
    return Message({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": uri}})


def planned(
    s: Server, message: Message, headers: dict[str, str], hints: LearnedTools | None = None
):
    headers = {**PROTOCOL, **headers}
    return plan(Asked.of(s, message, headers), "app", hints)


@pytest.mark.parametrize(
    ("value", "skipped"),
    [("latest", True), ("Latest", True), ("nightly", True), ("4.2", False), (None, False)],
)
def test_skip_if_names_values_compared_as_text(value: Any, skipped: bool) -> None:
    s = server(tools=[{"name": "get_*", "skipIf": {"version": ["latest", "nightly"]}}])
    decided = planned(s, call("get_release", {"version": value}), {})
    assert isinstance(decided, Bypass) is skipped
    if skipped:
        assert (decided.fwd, decided.detail) == ("bypass", "skip-if")


def test_skip_if_compares_numbers_and_their_text_alike() -> None:
    s = server(tools=[{"name": "t", "skipIf": {"n": 7, "on": True}}])
    for args in ({"n": 7}, {"n": "7"}, {"n": 7.0}, {"on": "true"}):
        assert isinstance(planned(s, call("t", args), {}), Bypass), args
    assert isinstance(planned(s, call("t", {"n": 8, "on": False}), {}), Lookup)


def test_matched_removal_carries_digests_never_values() -> None:
    s = server(
        tools=[
            {
                "name": "create_issue",
                "invalidates": ["x", {"tool": "list_*", "match": ["repo", "owner"]}],
            }
        ]
    )
    decided = planned(s, call("create_issue", {"owner": "Octo", "repo": "hello"}), {})
    assert isinstance(decided, Bypass)
    glob, matched = decided.invalidates
    assert glob == "x"
    assert isinstance(matched, MatchedRemoval)
    assert [name for name, _ in matched.values] == ["owner", "repo"]
    assert "Octo" not in repr(matched)
    assert "hello" not in repr(matched)


def test_an_entry_records_the_values_writes_match_on_and_a_write_finds_it() -> None:
    s = server(
        tools=[
            {
                "name": "create_issue",
                "invalidates": [{"tool": "list_issues", "match": ["owner", "repo"]}],
            }
        ]
    )
    entry = planned(s, call("list_issues", {"owner": "octo", "repo": "hello", "page": 2}), {})
    assert isinstance(entry, Lookup)
    assert [name for name, _ in entry.scope.arguments] == ["owner", "repo"]

    def removes(write_args: dict[str, Any]) -> bool:
        write = planned(s, call("create_issue", write_args), {})
        assert isinstance(write, Bypass)
        removal = write.invalidates[0]
        if isinstance(removal, str):
            return True
        return recorded_match(entry.scope.arguments, removal.values)

    assert removes({"owner": "octo", "repo": "hello"})
    assert removes({"owner": "OCTO", "repo": "Hello"}), "case does not tell repositories apart"
    assert not removes({"owner": "octo", "repo": "other"})
    assert removes({"owner": "octo"}), "a write without a matched argument removes them all"


def test_an_entry_without_a_recorded_value_is_removed_in_doubt() -> None:
    wanted = argument_digests(("owner",), {"owner": "a"})
    assert recorded_match((), wanted)
    other = argument_digests(("repo",), {"repo": "b"})
    assert recorded_match(other, wanted)


def test_an_unrelated_tool_records_no_argument_values() -> None:
    s = server(tools=[{"name": "w", "invalidates": [{"tool": "list_issues", "match": ["owner"]}]}])
    decided = planned(s, call("search", {"owner": "a"}), {})
    assert isinstance(decided, Lookup)
    assert decided.scope.arguments == ()


PLAIN = {
    "type": "object",
    "properties": {"q": {"type": "string"}, "limit": {"type": "integer", "default": 10}},
    "required": ["q"],
}


@pytest.mark.parametrize(
    ("schema", "defaults"),
    [
        (PLAIN, {"limit": 10}),
        ({**PLAIN, "$ref": "#/$defs/x"}, {}),
        ({**PLAIN, "anyOf": [{"required": ["limit"]}]}, {}),
        ({**PLAIN, "if": {}, "then": {}}, {}),
        ({**PLAIN, "patternProperties": {"^l": {"default": 3}}}, {}),
        ({**PLAIN, "type": "array"}, {}),
        ({"properties": {"c": {"$ref": "#/$defs/C", "default": "red"}}}, {}),
        (
            {
                "properties": {
                    "c": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
                }
            },
            {},
        ),
        ({"properties": {"c": {"type": "string", "default": 5}}}, {}),
        ({"properties": {"c": {"type": "integer", "default": True}}}, {}),
        ({"properties": {"c": {"enum": ["a", "b"], "default": "z"}}}, {}),
        ({"properties": {"c": {"type": "string", "default": "a"}}, "required": ["c"]}, {}),
        ({"properties": {"c": {"type": "array", "items": {"$ref": "#/x"}, "default": []}}}, {}),
        ({"properties": {"c": {"type": ["string", "null"], "default": None}}}, {"c": None}),
        ("not a schema", {}),
    ],
)
def test_only_defaults_read_with_certainty_are_used(schema: Any, defaults: dict[str, Any]) -> None:
    assert certain_defaults(schema) == defaults


def listing(schema: Any) -> dict[str, Any]:
    return {"tools": [{"name": "search", "inputSchema": schema}]}


def listed(s: Server, hints: LearnedTools, result: dict[str, Any], headers: dict[str, str]) -> str:
    """Learn from a `tools/list` answer as the proxy does: under the caller it was shown."""
    message = Message({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    learner = planned(s, message, headers, hints).learner
    assert learner is not None
    hints.learn(s.name, result, learner)
    return learner


def test_filled_defaults_make_an_omitted_argument_read_its_explicit_defaults_entry() -> None:
    s = server(fillSchemaDefaults=True)
    hints = LearnedTools()
    listed(s, hints, listing(PLAIN), {})
    omitted = planned(s, call("search", {"q": "x"}), {}, hints)
    explicit = planned(s, call("search", {"q": "x", "limit": 10}), {}, hints)
    assert isinstance(omitted, Lookup)
    assert isinstance(explicit, Lookup)
    assert omitted.named_key == explicit.key, "the omitted call reads the explicit entry"
    assert omitted.key != explicit.key, "and files its own answer apart"
    assert explicit.named_key == ""
    keys = {omitted.key, explicit.key}
    assert planned(s, call("search", {"q": "x", "limit": 11}), {}, hints).key not in keys  # type: ignore[union-attr]
    assert planned(s, call("search", {"q": "x"}), {}, LearnedTools()).key not in keys  # type: ignore[union-attr]
    off = server()
    assert planned(off, call("search", {"q": "x"}), {}, hints).key not in keys  # type: ignore[union-attr]


def test_skip_if_applies_to_a_default_that_fill_schema_defaults_filled_in() -> None:
    rules = [{"name": "search", "skipIf": {"limit": 10}}]
    s = server(fillSchemaDefaults=True, tools=rules)
    hints = LearnedTools()
    listed(s, hints, listing(PLAIN), {})
    assert planned(s, call("search", {"q": "x"}), {}, hints) == Bypass("skip_if")
    assert planned(s, call("search", {"q": "x", "limit": 10}), {}, hints) == Bypass("skip_if")
    assert isinstance(planned(s, call("search", {"q": "x", "limit": 5}), {}, hints), Lookup)
    unlearned = planned(s, call("search", {"q": "x"}), {}, LearnedTools())
    assert isinstance(unlearned, Lookup), "nothing filled: nothing to skip"


def test_learned_defaults_hold_only_as_long_as_their_listing_may_be_cached() -> None:
    now = [100.0]
    hints = LearnedTools(clock=lambda: now[0])
    hints.learn("s", listing(PLAIN), "alice", 5)
    assert hints.defaults("s", "alice", "search") == {"limit": 10}
    now[0] = 105.0
    assert hints.defaults("s", "alice", "search") == {}
    assert not hints.knows("s", "alice")
    other = {
        **PLAIN,
        "properties": {**PLAIN["properties"], "limit": {"type": "integer", "default": 20}},
    }
    hints.learn("s", listing(other), "alice", 5)  # a redeploy's listing, learned anew
    assert hints.defaults("s", "alice", "search") == {"limit": 20}
    assert listing_ttl({"ttlMs": 1500}, 300, 30) == 1.5
    assert listing_ttl({"ttlMs": 0}, 300, 30) == 300
    assert listing_ttl({}, None, 30) == 30


def test_listings_that_disagree_leave_a_tool_with_no_defaults_until_forgotten() -> None:
    hints = LearnedTools()
    hints.learn("s", listing(PLAIN), "alice")
    other = {
        **PLAIN,
        "properties": {**PLAIN["properties"], "limit": {"type": "integer", "default": 20}},
    }
    hints.learn("s", listing(other), "alice")
    assert hints.defaults("s", "alice", "search") == {}
    hints.learn("s", listing(PLAIN), "alice")
    assert hints.defaults("s", "alice", "search") == {}
    hints.forget("s")
    hints.learn("s", listing(PLAIN), "alice")
    assert hints.defaults("s", "alice", "search") == {"limit": 10}


def test_listings_that_differ_only_in_json_type_disagree() -> None:
    hints = LearnedTools()
    hints.learn("s", listing({"properties": {"a": {"default": 1}}}), "alice")
    hints.learn("s", listing({"properties": {"a": {"default": True}}}), "alice")
    assert hints.defaults("s", "alice", "search") == {}


def test_defaults_are_learned_per_caller_and_fill_only_that_callers_calls() -> None:
    # A server whose `owner` defaults to the logged-in user shows each caller its own
    # default: Alice's listing must not decide what Bob's omitted owner means.
    s = server(fillSchemaDefaults=True)
    hints = LearnedTools()
    alice, bob = {"authorization": "alice"}, {"authorization": "bob"}
    listed(s, hints, listing_with_default("alice"), alice)

    def key(args: dict[str, Any], headers: dict[str, str]) -> str:
        """The entry the call reads: for a filled one, the explicit call's."""
        lookup = planned(s, call("list_repos", args), headers, hints)
        assert isinstance(lookup, Lookup)
        return lookup.named_key or lookup.key

    assert key({}, alice) == key({"owner": "alice"}, alice), "Alice's own default fills in"
    assert key({}, bob) != key({"owner": "alice"}, bob), "Bob never got Alice's default"
    listed(s, hints, listing_with_default("bob"), bob)
    assert key({}, bob) == key({"owner": "bob"}, bob)
    assert key({}, alice) == key({"owner": "alice"}, alice), "Bob's listing leaves Alice's"


def test_the_callers_whose_defaults_are_kept_are_bounded() -> None:
    hints = LearnedTools()
    for n in range(MAX_CALLERS_PER_SERVER + 1):
        hints.learn("s", listing(PLAIN), f"caller-{n}")
    assert hints.defaults("s", "caller-0", "search") == {}, "the least recent is forgotten"
    assert hints.defaults("s", "caller-1", "search") == {"limit": 10}


def test_ambiguous_headers_neither_learn_nor_fill_nor_look_up() -> None:
    s = server(fillSchemaDefaults=True)
    twice = [("authorization", "a"), ("authorization", "b"), *PROTOCOL.items()]
    message = Message({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    listing_plan = plan(Asked(s, message, dict(twice), twice), "app", LearnedTools())
    assert isinstance(listing_plan, Bypass)
    assert listing_plan.learner is None
    decided = plan(Asked(s, call("search", {"q": "x"}), dict(twice), twice), "app", LearnedTools())
    assert decided == Bypass("ambiguous_headers")


def test_a_public_key_drops_identity_and_session_but_keeps_every_other_header() -> None:
    s = server(tools=[{"name": "search", "scope": "public"}])
    alice = planned(s, call("search", {"q": "x"}), {"authorization": "a", "mcp-session-id": "1"})
    bob = planned(s, call("search", {"q": "x"}), {"authorization": "b", "mcp-session-id": "2"})
    tenant = planned(s, call("search", {"q": "x"}), {"authorization": "b", "x-tenant": "t"})
    assert isinstance(alice, Lookup)
    assert isinstance(bob, Lookup)
    assert isinstance(tenant, Lookup)
    assert alice.key == bob.key != tenant.key
    assert alice.scope.public
    assert alice.session == ""
    assert "authorization" not in alice.keyed
    assert "mcp-session-id" not in alice.keyed


def test_a_public_key_never_equals_a_private_key_not_even_an_anonymous_callers() -> None:
    """The attack: an entry stored for a caller who sent no credential (private, as the
    server marked it) is keyed on no identity at all; were the public key the same, a
    rule made public later, or `trustPublicHints`, would hand it to everyone."""
    private = planned(server(), call("search", {"q": "x"}), {})
    public = planned(
        server(tools=[{"name": "search", "scope": "public"}]), call("search", {"q": "x"}), {}
    )
    assert isinstance(private, Lookup)
    assert isinstance(public, Lookup)
    assert private.key != public.key
    hinted = planned(server(trustPublicHints=True), read("doc://x"), {})
    anonymous = planned(server(), read("doc://x"), {})
    assert isinstance(hinted, Lookup)
    assert isinstance(anonymous, Lookup)
    assert hinted.key == anonymous.key != hinted.public_key


def test_a_public_key_keeps_every_copy_of_a_repeated_header() -> None:
    """The attack: alice sends a header twice (the upstream sees both copies) and bob
    once, with the value the parsed headers hold; they must not meet on a public key."""
    s = server(trustPublicHints=True, tools=[{"name": "search", "scope": "public"}])
    for message in (read("doc://x"), call("search", {})):
        twice = [("x-variant", "a"), ("x-variant", "b"), *PROTOCOL.items()]
        alice = plan(Asked(s, message, {**PROTOCOL, "x-variant": "b"}, twice), "app")
        bob = planned(s, message, {"x-variant": "b"})
        assert isinstance(alice, Lookup)
        assert isinstance(bob, Lookup)
        assert (alice.public_key or alice.key) != (bob.public_key or bob.key)


def test_only_the_six_scoped_results_get_a_public_key_and_only_when_trusted() -> None:
    trusted = server(trustPublicHints=True, metadataTTL="1m")
    assert planned(trusted, read("doc://x"), {}).public_key  # type: ignore[union-attr]
    assert not planned(trusted, call("search", {}), {}).public_key  # type: ignore[union-attr]
    assert not planned(server(), read("doc://x"), {}).public_key  # type: ignore[union-attr]


def lookup_for(s: Server, message: Message, headers: dict[str, str]) -> Lookup:
    decided = planned(s, message, headers)
    assert isinstance(decided, Lookup)
    return decided


@pytest.mark.parametrize(
    ("scope", "headers", "public"),
    [
        ("public", {}, True),
        ("private", {}, False),
        (None, {}, False),
        ("public", {"vary": "Authorization"}, False),
        ("public", {"vary": "mcp-session-id"}, False),
        ("public", {"vary": "accept"}, True),
        ("public", {"set-cookie": "a=b"}, False),
    ],
)
def test_a_result_is_filed_for_everyone_only_as_marked_and_when_nothing_says_otherwise(
    scope: Any, headers: dict[str, str], public: bool
) -> None:
    s = server(trustPublicHints=True)
    lookup = lookup_for(s, read("doc://x"), {"authorization": "alice"})
    filed = filing(s, lookup, Verdict(None, b"{}", scope=scope), headers)
    assert (filed.key == lookup.public_key) is public
    assert filed.scope.public is public
    assert (filed.key == lookup.key) is not public


def test_a_result_marked_public_whose_stream_had_notifications_stays_its_callers() -> None:
    """The server's mark is the result's: a log line before it may name who asked."""
    s = server(trustPublicHints=True)
    lookup = lookup_for(s, read("doc://x"), {"authorization": "alice"})
    log = (b'event: message\ndata: {"method":"notifications/message"}\n\n', b"")
    filed = filing(s, lookup, Verdict(None, b"{}", scope="public", notes=(log,)), {})
    assert (filed.key, filed.scope.public) == (lookup.key, False)


def test_a_result_of_a_public_tool_the_server_marks_private_is_not_stored() -> None:
    s = server(tools=[{"name": "search", "scope": "public"}])
    lookup = lookup_for(s, call("search", {}), {})
    assert scoped(lookup, Verdict(None, b"{}", scope="private"), {}).reason == ("private_result")
    assert scoped(lookup, Verdict(None, b"{}"), {"set-cookie": "a"}).reason == ("private_result")
    assert scoped(lookup, Verdict(None, b"{}"), {}).reason is None
    own = lookup_for(server(), call("search", {}), {})
    assert scoped(own, Verdict(None, b"{}", scope="private"), {}).reason is None


@pytest.mark.parametrize("reason", ["error", "tool_error", "ttl_zero", "over_budget"])
def test_followers_on_a_public_key_share_only_a_stored_answer(reason: Any) -> None:
    """The attack: bob's identical call waits on alice's; alice's error (which may name
    her) is not bob's answer when their key is one for every caller."""
    verdict = Verdict(reason)
    assert follower_share(200, verdict, True, True) == "answer"
    assert follower_share(200, verdict, True, True, public=True) == "alone"
    assert follower_share(200, Verdict(None), True, True, public=True) == "answer"


@pytest.mark.parametrize(
    "rule",
    [
        {"name": "w", "enabled": False, "scope": "public"},
        {"name": "w", "invalidates": ["r"], "skipIf": {"v": "latest"}},
        {"name": "w", "scope": "everyone"},
        {"name": "w", "skipIf": {"v": []}},
        {"name": "w", "skipIf": {"v": {"nested": 1}}},
        {"name": "w", "invalidates": [{"tool": "r", "match": []}]},
        {"name": "w", "invalidates": [{"tool": "r"}]},
        {"name": "w", "invalidates": [{"tool": "r", "match": ["a", "a"]}]},
    ],
)
def test_rules_that_cannot_mean_anything_are_refused(rule: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ServerCache.model_validate({"tools": [rule]})


def test_the_scope_of_an_entry_is_public_only_for_public_rules() -> None:
    assert Scope("s").public is False


def listing_with_default(owner: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"owner": {"type": "string", "default": owner}}}
    return {"tools": [{"name": "list_repos", "inputSchema": schema}]}


def test_a_default_learned_from_one_callers_listing_never_fills_a_public_key() -> None:
    # Alice's listing says `owner` defaults to "alice" (a server that defaults to the
    # logged-in user); Bob's omitted owner means his own repositories.
    s = server(fillSchemaDefaults=True, tools=[{"name": "list_repos", "scope": "public"}])
    hints = LearnedTools()
    listed(s, hints, listing_with_default("alice"), {"authorization": "alice"})
    alice = planned(s, call("list_repos", {"owner": "alice"}), {"authorization": "alice"}, hints)
    bob = planned(s, call("list_repos", {}), {"authorization": "bob"}, hints)
    assert isinstance(alice, Lookup)
    assert isinstance(bob, Lookup)
    assert alice.key != bob.key


def test_a_public_rule_keeps_callers_apart_when_the_protocol_version_is_unknown() -> None:
    # A session without the version header: its version is whatever it negotiated.
    s = server(tools=[{"name": "search", "scope": "public"}])
    old = {"authorization": "a", "mcp-session-id": "negotiated-2024-11-05"}
    new = {"authorization": "b", "mcp-session-id": "negotiated-2025-03-26"}
    keys = [plan(Asked.of(s, call("search", {"q": "x"}), h), "app") for h in (old, new)]
    assert all(isinstance(k, Lookup) for k in keys)
    assert keys[0].key != keys[1].key  # type: ignore[union-attr]
    with_version = planned(s, call("search", {"q": "x"}), {"authorization": "a"})
    assert isinstance(with_version, Lookup)
    assert with_version.scope.public, "with the version header the rule still shares"


def test_a_public_key_names_which_credentials_were_sent_never_their_values() -> None:
    s = server(tools=[{"name": "search", "scope": "public"}])

    def key(headers: dict[str, str]) -> str:
        lookup = planned(s, call("search", {"q": "x"}), headers)
        assert isinstance(lookup, Lookup)
        assert lookup.scope.public
        return lookup.key

    alice, bob = key({"authorization": "alice"}), key({"authorization": "bob"})
    assert alice == bob
    assert len({alice, key({}), key({"x-api-key": "k"}), key({"cookie": "c"})}) == 4
    assert key({"authorization": "a", "cookie": "c"}) == key({"cookie": "d", "authorization": "b"})


def test_the_public_side_of_a_lookup_is_the_entry_for_every_caller() -> None:
    s = server(trustPublicHints=True, sessionScoped=True)
    headers = {"authorization": "alice", "mcp-session-id": "1"}
    lookup = planned(s, read("doc://a"), headers)
    assert isinstance(lookup, Lookup)
    assert lookup.public_key not in ("", lookup.key)
    assert lookup.session != ""
    public = public_side(lookup)
    assert (public.key, public.session, public.public_key) == (lookup.public_key, "", "")
    assert public.scope == lookup.scope._replace(public=True)
    assert (public.ttl, public.keyed, public.learner) == (lookup.ttl, lookup.keyed, None)


def test_a_request_too_deep_for_a_key_goes_upstream_uncached_with_its_writes() -> None:
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    rules = [{"name": "update", "invalidates": ["search"]}, {"name": "search", "enabled": True}]
    s = server(tools=rules)
    read_plan = planned(s, call("search", {"q": deep}), {})
    write_plan = planned(s, call("update", {"q": deep}), {})
    assert read_plan == Bypass("too_deep")
    assert isinstance(write_plan, Bypass)
    assert write_plan.invalidates == ("search",)


def test_params_by_position_are_their_own_bypass() -> None:
    message = read_message(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["x"]}')
    assert planned(server(), message, {}) == Bypass("positional_params")


def test_the_key_for_every_caller_names_the_server_the_method_the_app_and_the_arguments() -> None:
    def public_key(s: Server, message: Message, app: str = "app") -> str:
        headers = {**PROTOCOL, "authorization": "alice"}
        lookup = plan(Asked.of(s, message, headers), app)
        assert isinstance(lookup, Lookup)
        assert lookup.public_key
        return lookup.public_key

    s = server(trustPublicHints=True)
    other = Server.model_validate(
        {"name": "t", "url": "http://u/mcp", "cache": {"enabled": True, "trustPublicHints": True}}
    )
    base = public_key(s, read("doc://a"))
    assert base != public_key(other, read("doc://a"))
    assert base != public_key(s, read("doc://a"), "other-app")
    assert base != public_key(s, read("doc://b"))
    listing = Message({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    listed = server(trustPublicHints=True, metadataTTL="5m")
    assert public_key(listed, listing) != public_key(
        listed, Message({"jsonrpc": "2.0", "id": 1, "method": "prompts/list", "params": {}})
    )


def test_a_call_on_a_server_without_rules_is_filed_under_its_tool() -> None:
    lookup = planned(server(), call("search", {"q": "x"}), {})
    assert isinstance(lookup, Lookup)
    assert lookup.scope == Scope("s", tool="search")


def test_a_listing_names_its_caller_wherever_the_server_caches() -> None:
    # Every listing teaches the tools' hints now (writers among them), cached or not.
    listing = Message({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    learning = planned(server(metadataTTL="5m", fillSchemaDefaults=True), listing, {})
    cached = planned(server(metadataTTL="5m"), listing, {})
    off = planned(server(enabled=False), listing, {})
    assert isinstance(learning, Lookup)
    assert isinstance(cached, Lookup)
    assert learning.learner is not None
    assert learning.learner == planned(server(fillSchemaDefaults=True), listing, {}).learner
    assert cached.learner == learning.learner
    assert off.learner is None


def nested(levels: int, around: Any) -> Any:
    """`around` inside `levels` one-member objects (lists, when `around` is a list)."""
    for _ in range(levels):
        around = [around] if isinstance(around, list) else {"a": around}
    return around


@pytest.mark.parametrize("kind", [{}, []])
def test_a_property_nested_past_16_levels_has_no_certain_default(kind: Any) -> None:
    def schema(levels: int) -> dict[str, Any]:
        return {"properties": {"p": {"default": 1, "examples": nested(levels, kind)}}}

    assert certain_defaults(schema(15)) == {"p": 1}
    assert certain_defaults(schema(16)) == {}


def test_a_reference_inside_a_list_makes_a_default_uncertain() -> None:
    prop = {"default": 1, "items": [{"type": "integer"}, {"$ref": "#/$defs/x"}]}
    assert certain_defaults({"properties": {"p": prop}}) == {}


def test_properties_and_required_must_be_an_object_and_a_list() -> None:
    assert certain_defaults({"properties": None, "required": []}) == {}
    assert certain_defaults({"properties": {"p": {"default": 1}}, "required": "q"}) == {}


def test_at_most_64_defaults_are_taken() -> None:
    properties = {f"p{n}": {"default": n} for n in range(70)}
    assert certain_defaults({"properties": properties}) == {f"p{n}": n for n in range(64)}


@pytest.mark.parametrize(
    ("prop", "certain"),
    [
        ({"type": ["string", "widget"], "default": "x"}, True),
        ({"type": "boolean", "default": True}, True),
        ({"type": "string", "enum": ["a", "b"], "default": "a"}, True),
        ({"const": "a", "default": "a"}, True),
        ({"const": "a", "default": "b"}, False),
    ],
)
def test_a_default_of_its_own_type_enum_and_const_is_certain(prop: Any, certain: bool) -> None:
    expected = {"p": prop["default"]} if certain else {}
    assert certain_defaults({"properties": {"p": prop}}) == expected
