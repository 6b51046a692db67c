"""The one shared response cache: two budgets, nearest-to-expiry eviction. Pure, no
I/O. On `cachetools.Cache`: its `getsizeof` hook counts bytes, its `popitem` hook picks
the victim; the entry-count budget is the second limit the base class does not have.

An entry may outlive its expiry by its `keep_stale` window, for answers the policy
allows when the upstream fails or while it is asked again. Such entries still count
against both budgets, and, being expired, are the first to go when space is needed.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Literal, NamedTuple

import cachetools

from .entry import Entry, Layout, Note, Scope, lay_out, notes_size, rfc3339
from .globs import matches

__all__ = ["Census", "Entry", "EvictionReason", "Layout", "ResponseCache", "Scope"]

EvictionReason = Literal["expired", "capacity", "purged"]


class Census(NamedTuple):
    """What the cache holds at one moment: live entries (fresh: a lookup may return
    them) and expired ones still kept (for stale answers, or not yet dropped: expired
    entries are dropped lazily, and are the first to go when space is needed)."""

    entries: int
    bytes: int
    expired_entries: int
    expired_bytes: int


def _entry_size(entry: Entry) -> int:
    return entry.size


class ResponseCache(cachetools.Cache[str, Entry]):
    """At most `max_entries` entries and `max_bytes` bytes, whichever is reached first.

    Storing an entry evicts the entries closest to expiring until it fits; expired
    entries are closest of all. A lookup never returns an expired entry.

    Entries stored with a `Scope` are indexed by it, so that a server's, a tool's or a
    resource's entries can be removed without a scan. The index changes only when an
    entry is stored or removed; a lookup never touches it.
    """

    def __init__(
        self,
        max_entries: int,
        max_bytes: int,
        timer: Callable[[], float] = time.monotonic,
        on_evict: Callable[[EvictionReason], None] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(maxsize=max_bytes, getsizeof=_entry_size)
        self.max_entries = max_entries
        self.timer = timer
        self.wall = wall
        """The wall clock, for the time an entry was stored as an answer states it."""
        self.age_notes: Callable[[str], bool] = lambda server: False
        """Whether a server's hits start with a note of their age (its `ageNote`)."""
        self._on_evict = on_evict
        self._expiry_heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._index: dict[str, dict[Scope, set[str]]] = {}
        self._sessions: dict[str, set[str]] = {}
        """The keys of the entries given inside each legacy session that keeps its own
        (so that a session's end costs its own entries, not a scan of all)."""

    @property
    def max_bytes(self) -> int:
        return int(self.maxsize)

    def get_fresh(self, key: str) -> Entry | None:
        """The entry for `key` if it has not expired; one past its stale window is dropped."""
        entry = self.get(key)
        if entry is None:
            return None
        now = self.timer()
        if entry.expires_at <= now:
            if entry.drop_at <= now:
                self._remove(key, "expired")
            return None
        return entry

    def census(self) -> Census:
        """Live and expired entries and bytes, counted without changing anything (a
        scan: for scrapes and stats, never the request path)."""
        now = self.timer()
        entries = size = 0
        for entry in self.values():
            if entry.expires_at > now:
                entries += 1
                size += entry.size
        return Census(entries, size, len(self) - entries, int(self.currsize) - size)

    def get_stale(self, key: str) -> Entry | None:
        """The entry for `key` if it has expired but is still within its stale window."""
        entry = self.get(key)
        if entry is None:
            return None
        now = self.timer()
        if entry.expires_at <= now < entry.drop_at:
            return entry
        return None

    def store(
        self,
        key: str,
        result: bytes,
        event_stream: bool,
        ttl: float,
        session: str = "",
        keep_stale: float = 0.0,
        ttl_at: int = 0,
        age: float = 0.0,
        scope: Scope | None = None,
        layout: Layout | None = None,
        age_note: bool | None = None,
        fetch_seconds: float = 0.0,
        notes: tuple[Note, ...] = (),
    ) -> Entry | None:
        """Store a result for `ttl` seconds, kept `keep_stale` seconds longer for stale
        answers; None when it can never fit the budget (see `make_entry` for the rest)."""
        size = len(result) + notes_size(notes) if notes else len(result)
        if ttl <= 0 or size > self.maxsize:
            return None
        entry = self.make_entry(
            result, event_stream, ttl, session, keep_stale, ttl_at, age, scope, layout, age_note,
            fetch_seconds, notes,
        )  # fmt: skip
        self._put(key, entry)
        return entry

    def make_entry(
        self,
        result: bytes,
        event_stream: bool,
        ttl: float,
        session: str = "",
        keep_stale: float = 0.0,
        ttl_at: int = 0,
        age: float = 0.0,
        scope: Scope | None = None,
        layout: Layout | None = None,
        age_note: bool | None = None,
        fetch_seconds: float = 0.0,
        notes: tuple[Note, ...] = (),
    ) -> Entry:
        """The entry `store` would keep, without keeping it (one too large to keep is
        answered as a kept one would be). `age`: how old the result already is (a copy
        from the shared tier), so that a hit's `Age` counts from the upstream's answer.
        `layout`: where a hit writes into `result` (`entry.encode`); without one, the
        bytes are laid out here (once per tier copy, never per hit). `age_note`: a hit's
        first text item says how old it is (None: as `age_notes` says for the server).
        `fetch_seconds`: how long the upstream took for it; `notes`: the notifications
        its stream carried before it, replayed on a hit."""
        if layout is None:
            result, layout = lay_out(result)
        if layout is not None:
            ttl_at = layout.ttl_at
        now = self.timer()
        stored_at = now - max(0.0, age)
        stamp = rfc3339(self.wall() - max(0.0, age))
        seq = next(self._seq)
        if age_note is None:
            age_note = scope is not None and self.age_notes(scope.server)
        return Entry(
            result, event_stream, stored_at, now + ttl, session, keep_stale, ttl_at, seq, scope,
            layout, stamp, age_note, fetch_seconds, notes,
        )  # fmt: skip

    def __setitem__(self, key: str, entry: Entry) -> None:
        """Insert or replace, evicting nearest-to-expiry entries until both budgets hold."""
        self._put(key, replace(entry, seq=next(self._seq)))

    def _put(self, key: str, entry: Entry) -> None:
        """`__setitem__` for an entry whose `seq` is already fresh: each stored entry is
        told apart in the expiry heap by it."""
        old = self.get(key)
        if old is None:
            while len(self) >= self.max_entries:
                self.popitem()
        else:
            if old.scope != entry.scope:
                self._unindex(key, old.scope)
            if old.session != entry.session:
                self._unindex_session(key, old.session)
        cachetools.Cache.__setitem__(self, key, entry)
        if entry.scope is not None:
            self._index.setdefault(entry.scope.server, {}).setdefault(entry.scope, set()).add(key)
        if entry.session:
            self._sessions.setdefault(entry.session, set()).add(key)
        heapq.heappush(self._expiry_heap, (entry.expires_at, entry.seq, key))
        if len(self._expiry_heap) > 2 * len(self) + 64:
            self._compact_heap()

    def __delitem__(self, key: str) -> None:
        """Remove without counting an eviction; the heap forgets it lazily (its `seq`
        no longer matches a live entry)."""
        entry = self[key]
        cachetools.Cache.__delitem__(self, key)
        self._unindex(key, entry.scope)
        self._unindex_session(key, entry.session)

    def _unindex_session(self, key: str, session: str) -> None:
        keys = self._sessions.get(session) if session else None
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._sessions[session]

    def _unindex(self, key: str, scope: Scope | None) -> None:
        if scope is None:
            return
        scopes = self._index.get(scope.server)
        if scopes is None:
            return
        keys = scopes.get(scope)
        if keys is None:
            return
        keys.discard(key)
        if not keys:
            del scopes[scope]
            if not scopes:
                del self._index[scope.server]

    def scopes(self, server: str) -> dict[Scope, set[str]]:
        """The indexed scopes of a server's entries, with their keys (do not modify)."""
        return self._index.get(server, {})

    def servers(self) -> Iterable[str]:
        return self._index.keys()

    def keys_for(
        self,
        server: str,
        tools: Iterable[str] = (),
        uri: str | None = None,
        resources: bool = False,
        listings: Iterable[str] = (),
        everything: bool = False,
    ) -> list[str]:
        """Keys of a server's entries: all of them (`everything`), or those of tools
        matching any of the `tools` globs, of resource `uri` (or of every resource), and
        of the list methods named in `listings`.

        The globs are matched once per tool name, not once per scope: with argument
        digests a tool has a scope per entry, and the globs may come from another
        replica's message (64 long ones against 100,000 entries took 3.8 s of the event
        loop when each scope was matched; `tiers.announcement` bounds the rest)."""
        globs, lists = tuple(tools), frozenset(listings)
        matched: dict[str, bool] = {}
        found: list[str] = []
        for scope, keys in self.scopes(server).items():
            if everything:
                found.extend(keys)
            elif scope.tool is not None:
                hit = matched.get(scope.tool)
                if hit is None:
                    hit = any(matches(scope.tool, glob) for glob in globs)
                    matched[scope.tool] = hit
                if hit:
                    found.extend(keys)
            elif scope.uri is not None:
                if resources or scope.uri == uri:
                    found.extend(keys)
            elif scope.listing in lists:
                found.extend(keys)
        return found

    def purge(self, keys: list[str]) -> int:
        """Remove these entries on request (not for space); returns how many were here."""
        removed = 0
        for key in keys:
            if key in self:
                self._remove(key, "purged")
                removed += 1
        return removed

    def popitem(self) -> tuple[str, Entry]:
        """Evict the entry nearest to its expiry (the cachetools eviction hook)."""
        while self._expiry_heap:
            expires_at, seq, key = heapq.heappop(self._expiry_heap)
            entry = self.get(key)
            if entry is None or entry.seq != seq:
                continue  # superseded or already removed
            reason: EvictionReason = "expired" if expires_at <= self.timer() else "capacity"
            self._remove(key, reason)
            return key, entry
        raise KeyError("cache is empty")

    def purge_session(self, session: str) -> int:
        """Remove every entry given inside `session` (its own, through the index: any
        caller can make the upstream answer 404 to a made-up session)."""
        return self.purge(list(self._sessions.get(session, ())))

    def _remove(self, key: str, reason: EvictionReason) -> None:
        del self[key]
        if self._on_evict is not None:
            self._on_evict(reason)

    def _compact_heap(self) -> None:
        self._expiry_heap = [
            item for item in self._expiry_heap if (e := self.get(item[2])) and e.seq == item[1]
        ]
        heapq.heapify(self._expiry_heap)
