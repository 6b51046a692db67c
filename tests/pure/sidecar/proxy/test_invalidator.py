"""Invalidation on its own (no sockets): which entries a write, a notification and a purge
remove, for every caller alike; that each removal moves the server's epoch on, is counted
and reported to the shared tier; and that only a changed purge marker purges."""

from __future__ import annotations

import logging

import pytest

from mcpcache.sidecar.cache.store import ResponseCache, Scope
from mcpcache.sidecar.config import parse_config
from mcpcache.sidecar.config.tools import ToolRule
from mcpcache.sidecar.metrics import Metrics
from mcpcache.sidecar.proxy.invalidator import Invalidator
from mcpcache.sidecar.rules.invalidation.notices import Notice
from mcpcache.sidecar.rules.invalidation.removals import MatchedRemoval, argument_digests, removals
from mcpcache.sidecar.rules.key.cache_key import secret_digest
from mcpcache.sidecar.rules.learned_tools import LearnedTools
from mcpcache.sidecar.rules.policy.arguments import with_defaults
from mcpcache.sidecar.rules.reading.arguments import arguments_of

SCOPES = {
    "search-alice": Scope("s", tool="search_docs"),
    "search-bob": Scope("s", tool="search_docs"),
    "list-issues": Scope("s", tool="list_issues"),
    "readme": Scope("s", uri="file:///readme"),
    "license": Scope("s", uri="file:///license"),
    "tools": Scope("s", listing="tools/list"),
    "resources": Scope("s", listing="resources/list"),
    "templates": Scope("s", listing="resources/templates/list"),
    "prompts": Scope("s", listing="prompts/list"),
    "other": Scope("t", tool="search_docs"),
}


class Setup:
    def __init__(self) -> None:
        self.cache = ResponseCache(100, 1 << 20, lambda: 0.0)
        for key, scope in SCOPES.items():
            self.cache.store(key, b"{}", False, 60, scope=scope)
        self.metrics = Metrics()
        self.hints = LearnedTools()
        self.hints.learn(
            "s", {"tools": [{"name": "t", "annotations": {"readOnlyHint": True}}]}, "someone"
        )
        self.dropped: list[str] = []
        self.invalidator = Invalidator(
            self.cache, self.metrics, self.hints, lambda server, told: self.dropped.append(server)
        )

    def left(self) -> set[str]:
        return set(self.cache)

    def counted(self, cause: str, server: str = "s") -> float:
        value = self.metrics.registry.get_sample_value(
            "mcpcache_invalidations_total", {"server": server, "cause": cause}
        )
        return value or 0.0


def test_a_write_drops_the_matching_tools_entries_of_every_caller() -> None:
    setup = Setup()
    assert setup.invalidator.tools("s", ["search_*"], "write") == 2
    assert setup.left() == set(SCOPES) - {"search-alice", "search-bob"}
    assert setup.counted("write") == 1
    assert setup.dropped == ["s"]
    assert setup.invalidator.epoch("s") == 1
    assert setup.invalidator.epoch("t") == 0, "another server's answers stay valid"


def test_every_removal_moves_the_epoch_on_even_when_nothing_matched() -> None:
    """An answer still in flight may match what a write changed: it must not be stored."""
    setup = Setup()
    assert setup.invalidator.tools("s", ["nothing_*"], "write") == 0
    assert setup.invalidator.purge("s", tool="nothing") == 0
    assert setup.invalidator.epoch("s") == 2
    assert setup.counted("write") == setup.counted("purge") == 1
    assert setup.dropped == ["s", "s"]
    assert setup.left() == set(SCOPES)


def test_a_resource_update_drops_that_resource_only() -> None:
    setup = Setup()
    assert setup.invalidator.notice("s", Notice("resource", "file:///readme")) == 1
    assert setup.left() == set(SCOPES) - {"readme"}
    assert setup.counted("notification") == 1


def test_a_changed_resource_list_drops_every_resource_and_the_resource_lists() -> None:
    setup = Setup()
    assert setup.invalidator.notice("s", Notice("resources")) == 4
    assert setup.left() == set(SCOPES) - {"readme", "license", "resources", "templates"}


def test_a_changed_prompt_list_drops_the_prompt_list_only() -> None:
    setup = Setup()
    assert setup.invalidator.notice("s", Notice("prompts")) == 1
    assert setup.left() == set(SCOPES) - {"prompts"}


def test_a_changed_tool_list_drops_every_tool_answer_and_forgets_the_hints() -> None:
    setup = Setup()
    assert setup.hints.read_only("s", "t")
    assert setup.invalidator.notice("s", Notice("tools")) == 4
    assert setup.left() == set(SCOPES) - {"search-alice", "search-bob", "list-issues", "tools"}
    assert not setup.hints.read_only("s", "t"), "the tools may have changed their hints"
    assert setup.counted("notification") == 1
    assert setup.dropped == ["s"]


def test_a_purge_drops_a_server_a_tool_or_a_resource() -> None:
    setup = Setup()
    assert setup.invalidator.purge("s", uri="file:///license") == 1
    assert setup.invalidator.purge("s", tool="list_*") == 1
    assert setup.invalidator.purge("s", tool="search_docs", uri="file:///readme") == 3
    assert setup.left() == {"tools", "resources", "templates", "prompts", "other"}
    assert setup.invalidator.purge("s") == 4
    assert setup.left() == {"other"}
    assert setup.counted("purge") == 4
    assert setup.counted("purge", "t") == 0
    assert setup.invalidator.epoch("s") == 4
    assert setup.hints.read_only("s", "t"), "a purge leaves the tools' hints alone"


def test_without_a_shared_tier_removals_still_happen() -> None:
    setup = Setup()
    invalidator = Invalidator(setup.cache, setup.metrics, setup.hints)
    assert invalidator.purge("s") == 9
    assert invalidator.epoch("s") == 1


def config(purge: str | None, url: str = "http://127.0.0.1:1/mcp") -> str:
    marker = "" if purge is None else f", purge: {purge!r}"
    return f"servers: [{{name: s, url: {url!r}{marker}}}, {{name: t, url: {url!r}}}]"


def test_only_a_changed_purge_marker_purges_its_server() -> None:
    setup = Setup()
    follow = setup.invalidator.follow_config
    assert follow(parse_config(config("one"))) == [], "a marker seen first is no change"
    assert setup.left() == set(SCOPES)
    assert follow(parse_config(config("one"))) == []
    assert follow(parse_config(config(None))) == [], "a marker taken away purges nothing"
    assert setup.left() == set(SCOPES)
    assert follow(parse_config(config("one"))) == ["s"], "a marker set again is a change"
    assert setup.left() == {"other"}
    assert setup.counted("purge") == 1
    setup.cache.store("again", b"{}", False, 60, scope=Scope("s", tool="x"))
    assert follow(parse_config(config("two"))) == ["s"]
    assert setup.left() == {"other"}
    assert setup.counted("purge", "t") == 0


def test_a_server_at_a_new_url_starts_with_no_hints() -> None:
    setup = Setup()
    setup.invalidator.follow_config(parse_config(config(None)))
    setup.invalidator.follow_config(parse_config(config(None)))
    assert setup.hints.read_only("s", "t"), "the same server keeps what it taught"
    setup.invalidator.follow_config(parse_config(config(None, "http://127.0.0.1:2/mcp")))
    assert not setup.hints.read_only("s", "t")
    # Its entries are keyed by server name (a purge is explicit), but for its tool
    # listings: those were the old server's, and a hit on one would teach its tools.
    assert setup.left() == set(SCOPES) - {"tools"}


def test_a_purge_by_marker_is_logged_with_its_server_and_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    setup = Setup()
    setup.invalidator.follow_config(parse_config(config("one")))
    with caplog.at_level(logging.INFO, logger="mcpcache.sidecar"):
        setup.invalidator.follow_config(parse_config(config("two")))
    (record,) = [r for r in caplog.records if r.name == "mcpcache.sidecar"]
    assert record.getMessage() == "purge marker changed; entries dropped"
    assert (record.server, record.removed) == ("s", 9)  # type: ignore[attr-defined]


def test_a_matched_write_drops_only_the_entries_filed_with_its_values() -> None:
    """Entries of `list_issues` are filed with the digests of `owner` and `repo`; a write
    matching on them drops the entries with the same values, and those it cannot tell
    apart (no digest recorded), for every caller — and plain globs still apply."""
    cache = ResponseCache(100, 1 << 20, lambda: 0.0)
    names = ("owner", "repo")
    ours = argument_digests(names, {"owner": "acme", "repo": "api"})
    theirs = argument_digests(names, {"owner": "acme", "repo": "web"})
    filed = {  # a scope of no tool first: the scan goes on past it
        "readme": Scope("s", uri="file:///readme"),
        "ours-alice": Scope("s", tool="list_issues", arguments=ours),
        "ours-public": Scope("s", tool="list_issues", arguments=ours, public=True),
        "theirs": Scope("s", tool="list_issues", arguments=theirs),
        "unknown": Scope("s", tool="list_issues"),
        "other-tool": Scope("s", tool="get_issue", arguments=ours),
        "search": Scope("s", tool="search_docs"),
    }
    for key, scope in filed.items():
        cache.store(key, b"{}", False, 60, scope=scope)
    metrics = Metrics()
    invalidator = Invalidator(cache, metrics, LearnedTools())
    removal = MatchedRemoval("list_*", ours)
    assert invalidator.tools("s", [removal, "search_*"], "write") == 4
    assert set(cache) == {"theirs", "other-tool", "readme"}
    assert invalidator.epoch("s") == 1
    assert invalidator.tools("s", [MatchedRemoval("nothing_*", ours)], "write") == 0
    assert set(cache) == {"theirs", "other-tool", "readme"}


def test_arguments_that_are_not_an_object_are_none() -> None:
    assert arguments_of({"arguments": ["a"]}) == {}
    assert arguments_of({}) == {}
    assert arguments_of({"arguments": {"a": 1}}) == {"a": 1}


def test_an_object_value_is_filed_under_its_canonical_json() -> None:
    ((_, digest),) = argument_digests(("q",), {"q": {"b": 1, "a": [2]}})
    assert digest == secret_digest('q\0json:{"a":[2],"b":1}')
    assert argument_digests(("q",), {"q": {"a": [2], "b": 1}}) == ((("q", digest),))
    assert argument_digests(("q",), {"q": {"a": [3], "b": 1}}) != ((("q", digest),))


def test_one_value_under_two_names_has_two_digests() -> None:
    (_, first), (_, second) = argument_digests(("a", "b"), {"a": "x", "b": "x"})
    assert first != second


def test_a_matched_write_removes_the_entries_of_the_tool_it_names() -> None:
    rule = ToolRule.model_validate(
        {"name": "create_issue", "invalidates": [{"tool": "list_*", "match": ["owner"]}]}
    )
    (removal,) = removals(rule, {"owner": "o", "title": "t"})
    assert removal == MatchedRemoval("list_*", argument_digests(("owner",), {"owner": "o"}))


def test_defaults_fill_a_call_sent_without_arguments() -> None:
    assert with_defaults({"name": "t"}, {"limit": 10}) == {
        "name": "t",
        "arguments": {"limit": 10},
    }


def test_a_write_with_a_value_too_deep_to_digest_removes_every_entry_of_the_tool() -> None:
    deep: object = 1
    for _ in range(300):
        deep = [deep]
    rule = ToolRule.model_validate(
        {"name": "edit", "invalidates": [{"tool": "list_*", "match": ["q"]}]}
    )
    assert argument_digests(("q",), {"q": deep}) == (("q", ""),)
    assert removals(rule, {"q": deep}) == ("list_*",)
