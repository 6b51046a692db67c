"""The store's bookkeeping: purges count what they removed, a session's entries go with
it, expiry is counted as such, and eviction stays nearest-to-expiry after the expiry heap
is compacted."""

from __future__ import annotations

import pytest

from mcpcache.sidecar.cache.store import EvictionReason, ResponseCache
from peers.clock import Clock


def cache(max_entries: int = 10, max_bytes: int = 1000) -> tuple[ResponseCache, Clock, list]:
    clock = Clock()
    evictions: list[EvictionReason] = []
    return ResponseCache(max_entries, max_bytes, clock, evictions.append), clock, evictions


def test_a_purge_counts_what_it_removed() -> None:
    store, _, evictions = cache()
    for key in ("a", "b", "c"):
        store.store(key, b"x", False, 10)
    assert store.purge(["a", "b", "missing"]) == 2
    assert set(store) == {"c"}
    assert evictions == ["purged", "purged"]


def test_a_session_takes_only_its_own_entries_with_it() -> None:
    store, _, _ = cache()
    store.store("a", b"x", False, 10, session="s1")
    store.store("b", b"x", False, 10, session="s1")
    store.store("c", b"x", False, 10, session="s2")
    store.store("d", b"x", False, 10)
    assert store.purge_session("s1") == 2
    assert set(store) == {"c", "d"}


def test_an_entry_expiring_this_instant_is_not_fresh_and_goes_as_expired() -> None:
    store, clock, evictions = cache()
    store.store("a", b"x", False, 5)
    store.store("b", b"x", False, 10)
    clock.now = 5
    assert store.get_fresh("a") is None
    assert store.get_fresh("b") is not None
    assert evictions == ["expired"]
    assert set(store) == {"b"}


def test_an_entry_expiring_this_instant_is_evicted_as_expired() -> None:
    store, clock, evictions = cache(max_entries=1)
    store.store("a", b"x", False, 5)
    clock.now = 5
    store.store("b", b"x", False, 5)
    assert evictions == ["expired"]


def test_an_empty_cache_has_nothing_to_evict() -> None:
    store, _, _ = cache()
    with pytest.raises(KeyError, match="cache is empty"):
        store.popitem()


def test_eviction_stays_nearest_to_expiry_after_the_heap_is_compacted() -> None:
    store, _, evictions = cache(max_entries=3)
    for n in range(5):
        store.store(f"gone{n}", b"x", False, 1 + n)
    store.purge([f"gone{n}" for n in range(5)])
    for n in range(200):  # superseded heap items pile up, then are compacted away
        store.store("hot", b"x", False, 100 + n)
    store.store("soon", b"x", False, 50)
    store.store("late", b"x", False, 500)
    store.store("new", b"x", False, 400)
    assert set(store) == {"hot", "late", "new"}
    assert evictions[-1] == "capacity"
    store.store("newer", b"x", False, 450)
    assert set(store) == {"late", "new", "newer"}, "hot (expiring at 299) went next"
