from __future__ import annotations

import fnmatch

import orjson
import pytest

from mcpcache.sidecar.cache.store import EvictionReason, ResponseCache, Scope
from mcpcache.sidecar.rules.protocol.results import encode_result
from peers.clock import Clock


def make(max_entries: int = 10, max_bytes: int = 1000) -> tuple[ResponseCache, Clock, list[str]]:
    clock = Clock(1000.0)
    evicted: list[EvictionReason] = []
    cache = ResponseCache(max_entries, max_bytes, timer=clock, on_evict=evicted.append)
    return cache, clock, evicted  # type: ignore[return-value]


def test_an_expired_entry_is_never_served() -> None:
    cache, clock, evicted = make()
    cache.store("k", b"1", event_stream=False, ttl=5)
    clock.now += 4.999
    assert cache.get_fresh("k") is not None
    clock.now += 0.001
    assert cache.get_fresh("k") is None
    assert "k" not in cache
    assert evicted == ["expired"]


def test_entry_budget_evicts_the_entry_nearest_to_expiry() -> None:
    cache, _, evicted = make(max_entries=3)
    cache.store("long", b"a", False, ttl=300)
    cache.store("short", b"b", False, ttl=10)
    cache.store("middle", b"c", False, ttl=60)
    cache.store("new", b"d", False, ttl=30)
    assert set(cache) == {"long", "middle", "new"}
    assert evicted == ["capacity"]


def test_byte_budget_evicts_until_the_new_entry_fits() -> None:
    cache, _, evicted = make(max_bytes=100)
    cache.store("a", b"x" * 40, False, ttl=10)
    cache.store("b", b"x" * 40, False, ttl=20)
    cache.store("c", b"x" * 10, False, ttl=30)
    cache.store("d", b"x" * 80, False, ttl=40)
    assert set(cache) == {"c", "d"}
    assert cache.currsize == 90
    assert evicted == ["capacity", "capacity"]


def test_expired_entries_go_first_when_space_is_needed() -> None:
    cache, clock, evicted = make(max_entries=2)
    cache.store("old", b"a", False, ttl=1)
    cache.store("fresh", b"b", False, ttl=100)
    clock.now += 2
    cache.store("new", b"c", False, ttl=50)
    assert set(cache) == {"fresh", "new"}
    assert evicted == ["expired"]


def test_an_entry_larger_than_the_whole_budget_is_not_stored() -> None:
    cache, _, evicted = make(max_bytes=100)
    cache.store("a", b"x" * 50, False, ttl=10)
    assert cache.store("huge", b"x" * 101, False, ttl=10) is None
    assert set(cache) == {"a"}
    assert evicted == []


def test_replacing_a_key_keeps_one_entry_and_its_new_expiry() -> None:
    cache, clock, _ = make(max_entries=2)
    cache.store("k", b"old", False, ttl=1)
    cache.store("k", b"new", False, ttl=100)
    clock.now += 50
    entry = cache.get_fresh("k")
    assert entry is not None
    assert entry.result == b"new"
    assert len(cache) == 1


def test_zero_ttl_is_not_stored() -> None:
    cache, _, _ = make()
    assert cache.store("k", b"x", False, ttl=0) is None
    assert len(cache) == 0


def test_budgets_hold_under_many_stores() -> None:
    cache, clock, _ = make(max_entries=50, max_bytes=5000)
    for i in range(5000):
        clock.now += 0.01
        cache.store(f"k{i % 300}", b"x" * (i % 250), False, ttl=(i * 7919) % 60 + 1)
        assert len(cache) <= 50
        assert cache.currsize <= 5000
    assert len(cache._expiry_heap) <= 2 * len(cache) + 65


def test_a_lookup_drops_an_expired_entry_and_only_it() -> None:
    cache, clock, evicted = make()
    cache.store("a", b"1", False, ttl=1)
    cache.store("b", b"2", False, ttl=10)
    clock.now += 5
    assert cache.get_fresh("a") is None
    assert cache.get_fresh("b") is not None
    assert set(cache) == {"b"}
    assert evicted == ["expired"]


def test_item_assignment_and_deletion_keep_the_expiry_order() -> None:
    cache, clock, evicted = make(max_entries=2)
    cache.store("a", b"1", False, ttl=100)
    cache["a"] = cache["a"].__class__(b"2", False, clock.now, clock.now + 1)
    cache.store("b", b"3", False, ttl=50)
    cache.store("c", b"4", False, ttl=60)  # "a" now expires first, whatever it was
    assert set(cache) == {"b", "c"}
    del cache["b"]
    cache.store("d", b"5", False, ttl=5)
    assert set(cache) == {"c", "d"}
    assert evicted == ["capacity"]


def test_a_purge_is_counted_as_purged_not_as_capacity() -> None:
    cache, _, evicted = make()
    cache.store("a", b"1", False, ttl=10)
    cache.store("b", b"2", False, ttl=10)
    assert cache.purge(["a", "missing"]) == 1
    assert set(cache) == {"b"}
    assert evicted == ["purged"]


def test_entries_are_indexed_by_scope_until_removed_whatever_removes_them() -> None:
    cache, clock, evicted = make(max_entries=3)
    cache.store("a", b"1", False, ttl=10, scope=Scope("docs", tool="get_doc"))
    cache.store("b", b"22", False, ttl=20, scope=Scope("docs", tool="search"))
    cache.store("c", b"333", False, ttl=30, scope=Scope("docs", uri="doc://x"))
    assert sorted(cache.keys_for("docs", tools=["get_*", "s*"])) == ["a", "b"]
    assert cache.keys_for("docs", uri="doc://x") == ["c"]
    assert cache.keys_for("docs", resources=True) == ["c"]
    assert sorted(cache.keys_for("docs", everything=True)) == ["a", "b", "c"]
    assert cache.keys_for("other", everything=True) == []

    cache.store("d", b"4", False, ttl=40, scope=Scope("other", tool="get_doc"))  # evicts "a"
    assert cache.keys_for("docs", tools=["*"]) == ["b"]
    clock.now += 25  # "b" expires
    assert cache.get_fresh("b") is None
    assert cache.purge(cache.keys_for("docs", everything=True)) == 1
    assert list(cache.servers()) == ["other"]
    assert evicted == ["capacity", "expired", "purged"]


def test_an_expired_entry_is_kept_for_its_stale_window_but_never_served_fresh() -> None:
    cache, clock, evicted = make()
    cache.store("k", b"1", False, ttl=5, keep_stale=10)
    assert cache.get_stale("k") is None, "a fresh entry is not stale"
    clock.now += 5
    assert cache.get_fresh("k") is None
    assert cache.get_stale("k") is not None
    assert cache.currsize == 1, "a stale entry still counts against the budget"
    clock.now += 10
    assert cache.get_stale("k") is None
    assert cache.get_fresh("k") is None
    assert "k" not in cache
    assert evicted == ["expired"]


def test_stale_entries_go_first_when_space_is_needed() -> None:
    cache, clock, evicted = make(max_entries=2)
    cache.store("stale", b"a", False, ttl=1, keep_stale=600)
    cache.store("fresh", b"b", False, ttl=5)
    clock.now += 2
    cache.store("new", b"c", False, ttl=50)
    assert set(cache) == {"fresh", "new"}
    assert evicted == ["expired"]


def test_an_expired_entry_is_kept_for_stale_answers_within_its_stale_window() -> None:
    cache, clock, _ = make()
    cache.store("a", b"1", False, ttl=1)
    cache.store("b", b"2", False, ttl=1, keep_stale=10)
    clock.now += 5
    assert cache.get_fresh("a") is None
    assert cache.get_fresh("b") is None
    assert set(cache) == {"b"}
    assert cache.get_stale("b") is not None
    clock.now += 10
    assert cache.get_stale("b") is None
    assert cache.get_fresh("b") is None
    assert len(cache) == 0


def test_a_stored_ttl_hint_is_restated_as_the_freshness_left() -> None:
    cache, clock, _ = make()
    result, ttl_at = encode_result({"content": [], "ttlMs": 60000, "cacheScope": "private"})
    entry = cache.store("k", result, False, ttl=30, ttl_at=ttl_at)
    assert entry is not None
    clock.now += 12.5
    restated = orjson.loads(b"".join(entry.result_parts(clock.now)))
    assert restated.pop("_meta")["io.mcpcache/age"] == 12
    assert restated == {"content": [], "ttlMs": 17500, "cacheScope": "private"}
    clock.now += 60
    assert orjson.loads(b"".join(entry.result_parts(clock.now)))["ttlMs"] == 0


def test_only_a_numeric_ttl_hint_is_restated() -> None:
    assert encode_result({"content": [], "ttlMs": "soon"}) == (b'{"content":[],"ttlMs":"soon"}', 0)
    assert encode_result({"content": []})[1] == 0
    result, ttl_at = encode_result({"ttlMs": 5})
    assert (result, ttl_at) == (b'{"ttlMs":5}', len(b'{"ttlMs":'))


def test_an_entry_stored_without_options_has_the_plain_defaults() -> None:
    cache, clock, _ = make()
    entry = cache.store("k", b'{"a":1}', event_stream=True, ttl=5)
    assert entry is not None
    assert (entry.event_stream, entry.session, entry.keep_stale, entry.note) == (
        True,
        "",
        0.0,
        False,
    )
    clock.now += 5
    assert cache.get_stale("k") is None, "no stale window unless one is given"


def test_bytes_that_are_not_an_object_keep_the_ttl_offset_they_came_with() -> None:
    cache, _, _ = make()
    entry = cache.store("k", b"[1,2]", False, ttl=5, ttl_at=3)
    assert entry is not None
    assert (entry.layout, entry.ttl_at) == (None, 3)


def test_the_age_note_follows_the_servers_setting_unless_told() -> None:
    cache, _, _ = make()
    cache.age_notes = lambda server: server == "noted"
    noted = cache.store("a", b"{}", False, ttl=5, scope=Scope("noted"))
    plain = cache.store("b", b"{}", False, ttl=5, scope=Scope("plain"))
    told = cache.make_entry(b"{}", False, ttl=5, scope=Scope("noted"), age_note=False)
    assert noted is not None
    assert plain is not None
    assert (noted.note, plain.note, told.note) == (True, False, False)


def test_entries_set_directly_with_one_expiry_are_told_apart() -> None:
    cache, _, _ = make()
    entry = cache.make_entry(b"{}", False, ttl=5)
    cache["a"] = entry
    cache["b"] = entry  # the same expiry: the heap orders them by their new sequence
    assert set(cache) == {"a", "b"}
    assert cache["a"].seq != cache["b"].seq


def test_a_removals_tool_globs_are_matched_once_per_tool_name_not_once_per_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Argument digests give every entry of a tool a scope of its own, and a removal's
    globs may come from another replica's message: matching them costs globs times
    the server's tool names, however many entries those tools have."""
    cache, _, _ = make(max_entries=3000, max_bytes=1 << 20)
    tools = ("get_doc", "search", "list_issues")
    for n in range(3000):
        digest = (("name", f"{n:064x}"),)
        scope = Scope("docs", tool=tools[n % 3], arguments=digest)
        cache.store(f"k{n}", b"1", False, ttl=60, scope=scope)
    matches: list[str] = []
    match = fnmatch.fnmatchcase

    def counted(name: str, pattern: str) -> bool:
        matches.append(name)
        return match(name, pattern)

    monkeypatch.setattr(fnmatch, "fnmatchcase", counted)
    globs = [f"{'*x' * 250}{n}" for n in range(63)] + ["get_*"]
    assert len(cache.keys_for("docs", tools=globs)) == 1000
    assert len(matches) <= len(tools) * len(globs)
