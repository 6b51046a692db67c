"""The cache under random operations: budgets hold, nothing stale is served, what is
stored and fresh is served, and eviction takes the entries nearest to expiry, only as
many as it must."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mcpcache.sidecar.cache.store import ResponseCache, Scope

KEYS = st.sampled_from([f"k{i}" for i in range(12)])
SCOPES = st.sampled_from(
    [Scope("a", tool="t1"), Scope("a", tool="t2"), Scope("a", uri="u"), Scope("b", tool="t1")]
)

SESSIONS = st.sampled_from(["", "s1", "s2"])


class CacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.cache = ResponseCache(max_entries=5, max_bytes=1000, timer=lambda: self.now)
        self.last: dict[str, bytes] = {}
        self.expiry: dict[str, float] = {}
        """When each entry the cache should still hold expires (a model of the cache)."""
        self.server_of: dict[str, str] = {}
        self.session_of: dict[str, str] = {}

    @rule(
        key=KEYS,
        size=st.integers(0, 1200),
        ttl=st.floats(0, 50, allow_nan=False),
        scope=SCOPES,
        session=SESSIONS,
    )
    def store(self, key: str, size: int, ttl: float, scope: Scope, session: str) -> None:
        before = {k: e for k, e in self.cache.items()}
        value = bytes([len(self.last) % 256]) * size
        stored = self.cache.store(key, value, False, ttl, session, scope=scope)
        if stored is None:
            assert ttl <= 0 or size > 1000
            return
        self.last[key] = value
        self.expiry[key] = self.now + ttl
        self.server_of[key] = scope.server
        self.session_of[key] = session
        survivors = {k: e for k, e in self.cache.items() if k != key}
        evicted = [e for k, e in before.items() if k not in survivors and k != key]
        for gone in [k for k in self.expiry if k != key and k not in survivors]:
            del self.expiry[gone]
        if evicted and survivors:
            assert max(e.expires_at for e in evicted) <= min(
                e.expires_at for e in survivors.values()
            )
        if evicted and key not in before:
            # Only as many as needed: the last one evicted would not have fitted beside it
            # (the last in eviction order: by expiry, ties by when each was stored).
            last = max(evicted, key=lambda e: (e.expires_at, e.seq))
            kept = sum(e.size for e in survivors.values())
            assert len(survivors) + 2 > 5 or kept + size + last.size > 1000

    @rule(seconds=st.floats(0, 20, allow_nan=False))
    def wait(self, seconds: float) -> None:
        self.now += seconds

    @precondition(lambda self: self.last)
    @rule(data=st.data())
    def lookup(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.last)))
        entry = self.cache.get_fresh(key)
        if key in self.expiry and self.expiry[key] > self.now:
            assert entry is not None, "a stored, fresh, unevicted entry must be served"
        if entry is not None:
            assert entry.expires_at > self.now
            assert entry.result == self.last[key]
        if key in self.expiry and self.expiry[key] <= self.now:
            assert entry is None
            del self.expiry[key]

    @rule()
    def look_everything_up(self) -> None:
        expired = {k for k, at in self.expiry.items() if at <= self.now}
        for key in list(self.expiry):
            assert (self.cache.get_fresh(key) is None) == (key in expired)
        assert not expired & set(self.cache)
        for key in expired:
            del self.expiry[key]

    @invariant()
    def holds_what_the_model_holds(self) -> None:
        assert set(self.cache) == set(self.expiry)

    @rule(server=st.sampled_from(["a", "b"]))
    def purge(self, server: str) -> None:
        self.cache.purge(self.cache.keys_for(server, everything=True))
        assert all(e.scope is None or e.scope.server != server for e in self.cache.values())
        for key in [k for k in self.expiry if self.server_of[k] == server]:
            del self.expiry[key]

    @rule(session=SESSIONS.filter(bool))
    def end_session(self, session: str) -> None:
        ended = {k for k in self.expiry if self.session_of[k] == session}
        held = ended & set(self.cache)
        assert self.cache.purge_session(session) == len(held)
        assert set(self.cache) == set(self.expiry) - ended
        for key in ended:
            del self.expiry[key]

    @invariant()
    def the_index_names_exactly_the_entries(self) -> None:
        indexed = {
            (key, scope)
            for server in self.cache.servers()
            for scope, keys in self.cache.scopes(server).items()
            for key in keys
        }
        assert indexed == {(k, e.scope) for k, e in self.cache.items()}

    @invariant()
    def within_budgets(self) -> None:
        assert len(self.cache) <= 5
        assert self.cache.currsize <= 1000
        assert self.cache.currsize == sum(e.size for e in self.cache.values())


TestCacheMachine = CacheMachine.TestCase
TestCacheMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
