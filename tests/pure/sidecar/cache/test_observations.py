"""What the upstream's answers showed over time, read as TTL suggestions: pure, with a
clock of the test's own."""

from __future__ import annotations

from mcpcache.sidecar.cache.entry import Scope
from mcpcache.sidecar.cache.observations import Observations, answer_digest, scope_label

HOUR = 3600.0
SAME, OTHER = answer_digest({"content": ["a"]}), answer_digest({"content": ["b"]})


def test_repeats_that_never_changed_suggest_a_quarter_of_the_span_rounded_down() -> None:
    seen = Observations()
    for hour in range(5):  # one key asked every hour for 4 hours, always the same
        seen.saw("docs", "search_docs", "k1", SAME, hour * HOUR)
    seen.saw("docs", "search_docs", "k2", OTHER, 0)  # asked once: no repeat
    assert seen.suggest("docs")["search_docs"] == {
        "calls": 6,
        "repeats": 4,
        "changed": 0,
        "stableSeconds": 4 * HOUR,
        "suggestedTTL": "1h",
        "verdict": "never changed",
    }


def test_a_change_after_a_stable_span_suggests_well_under_that_span() -> None:
    seen = Observations()
    seen.saw("gh", "get_repository", "k", SAME, 0)
    seen.saw("gh", "get_repository", "k", SAME, 3 * HOUR + 40 * 60)  # 3h40m the same
    seen.saw("gh", "get_repository", "k", OTHER, 5 * HOUR)
    seen.saw("gh", "get_repository", "other", SAME, 0)
    seen.saw("gh", "get_repository", "other", SAME, 20 * HOUR)  # longer, but not the least
    report = seen.suggest("gh")["get_repository"]
    assert report["verdict"] == "changed"
    assert report["stableSeconds"] == 3 * HOUR + 40 * 60
    assert report["suggestedTTL"] == "30m"
    assert (report["calls"], report["repeats"], report["changed"]) == (5, 3, 1)


def test_repeats_that_come_back_different_get_no_suggestion() -> None:
    seen = Observations()
    for minute in range(4):
        digest = answer_digest({"content": [f"page {minute}"]})
        seen.saw("web", "fetch_url", "k", digest, minute * 60.0)
    report = seen.suggest("web")["fetch_url"]
    assert report["verdict"] == "answers differ"
    assert report["suggestedTTL"] is None
    assert report["changed"] == 3


def test_a_tool_without_repeats_gets_no_suggestion() -> None:
    seen = Observations()
    seen.saw("s", "t", "a", SAME, 0)
    seen.saw("s", "t", "b", SAME, 100)
    assert seen.suggest("s")["t"]["verdict"] == "no repeats"
    assert seen.suggest("s")["t"]["suggestedTTL"] is None


def test_a_span_too_short_for_a_round_ttl_gets_none() -> None:
    seen = Observations()
    seen.saw("s", "t", "k", SAME, 0)
    seen.saw("s", "t", "k", SAME, 3.0)
    assert seen.suggest("s")["t"]["suggestedTTL"] is None
    seen.saw("s", "t", "k", SAME, 4.0)
    assert seen.suggest("s")["t"]["suggestedTTL"] == "1s"


def test_hints_and_meta_do_not_make_an_answer_different() -> None:
    plain = {"contents": [{"uri": "doc://a", "text": "x"}]}
    hinted = {**plain, "ttlMs": 5, "cacheScope": "private", "_meta": {"io.mcpcache/age": 9}}
    assert answer_digest(plain) == answer_digest(hinted)
    assert answer_digest(plain) != answer_digest({"contents": []})


def test_the_record_is_bounded_in_keys_and_tools() -> None:
    seen = Observations(max_keys=2, max_tools=1)
    for key in ("a", "b", "c"):
        seen.saw("s", "t", key, SAME, 0)
    seen.saw("s", "t", "a", SAME, 10)  # "a" was forgotten: not a repeat
    seen.saw("s", "other", "z", SAME, 0)  # no room for a second tool
    assert list(seen.suggest("s")) == ["t"]
    assert seen.suggest("s")["t"]["repeats"] == 0


def test_revalidations_are_tallied_per_tool() -> None:
    seen = Observations()
    for result in ("same", "same", "changed"):
        seen.revalidated("s", "t", result)  # type: ignore[arg-type]
    seen.saw("s", "quiet", "k", SAME, 0)
    assert seen.revalidations("s") == {"t": {"same": 2, "changed": 1, "failed": 0}}
    assert seen.revalidations("nobody") == {}


def test_entries_are_named_by_tool_or_by_method() -> None:
    assert scope_label(Scope("s", tool="search")) == "search"
    assert scope_label(Scope("s", uri="doc://a")) == "resources/read"
    assert scope_label(Scope("s", listing="tools/list")) == "tools/list"
    assert scope_label(None) == "(other)"


def test_tool_names_too_long_or_unprintable_are_counted_together() -> None:
    # Names come from callers, and are printed in a terminal by `mcpcache suggest`.
    seen = Observations()
    for n, name in enumerate(("x" * 129, "a\nb", "esc\x1b[2K", "y" * 128)):
        seen.saw("s", name, f"k{n}", SAME, 0)
    assert sorted(seen.suggest("s")) == ["(other)", "y" * 128]
    assert seen.suggest("s")["(other)"]["calls"] == 3
