"""The reading decision (`rules.lookup.choose`) against the rule it keeps
(`docs/operations/security.md#who-may-read-an-entry`), over generated lookups and
states of memory, flights and the shared tier: an entry for every caller answers only a
context the upstream answered; a hit is fresh, a stale answer is inside its window; a
request waits only on a call whose entry it could read; Redis is read only for answers
outside legacy sessions, and memory answers alone only while it may be trusted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mcpcache.sidecar.cache.entry import Entry
from mcpcache.sidecar.cache.store import ResponseCache, Scope
from mcpcache.sidecar.config import Server
from mcpcache.sidecar.rules.lookup import (
    Follow,
    Hit,
    Lead,
    ReadTier,
    Refresh,
    Stale,
    StepAside,
    Tiered,
    TierState,
    choose,
    on_failure,
)
from mcpcache.sidecar.rules.policy.plan import Bypass, Lookup

TTL, WINDOW = 10.0, 5.0
SOURCES = ("own", "named", "public")
STATES = st.sampled_from(["none", "fresh", "stale", "dropped"])


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    """One generated state: what the lookup is, what memory and flights hold."""

    lookup: Lookup
    verified: bool
    server: Server
    cache: ResponseCache
    clock: Clock
    in_flight: bool
    room: bool
    sources: dict[int, str]
    """Which key each stored entry is under (by the entry's identity)."""

    def fresh(self, key: str) -> Entry | None:
        return self.cache.get_fresh(key)

    def stale(self, key: str) -> Entry | None:
        return self.cache.get_stale(key)

    def running(self, key: str) -> bool:
        return self.in_flight

    def has_room(self, key: str) -> bool:
        return self.room

    def for_everyone(self, entry: Entry) -> bool:
        source = self.sources[id(entry)]
        return source == "public" or (source == "own" and self.lookup.scope.public)


@st.composite
def worlds(draw: Any) -> World:
    public, session = draw(st.booleans()), draw(st.booleans())
    named, public_key = draw(st.booleans()), draw(st.booleans())
    swr, sie = draw(st.booleans()), draw(st.booleans())
    cache_fields: dict[str, Any] = {"enabled": True}
    if swr:
        cache_fields["staleWhileRevalidate"] = f"{WINDOW:g}s"
    if sie:
        cache_fields["staleIfError"] = f"{WINDOW:g}s"
    server = Server.model_validate({"name": "s", "url": "http://s/mcp", "cache": cache_fields})
    lookup = Lookup(
        "own",
        TTL,
        Scope("s", tool="t", public=public),
        session="session-scope" if session else "",
        public_key="public" if public_key else "",
        named_key="named" if named else "",
    )
    clock = Clock()
    cache = ResponseCache(1024, 1 << 20, timer=clock)
    sources: dict[int, str] = {}
    states = {source: draw(STATES) for source in SOURCES}
    for source, state in states.items():
        if state == "none":
            continue
        # Stored so that, at the clock's time, it is fresh, inside its stale window,
        # or past it.
        age = {"fresh": 0.0, "stale": TTL + WINDOW / 2, "dropped": TTL + WINDOW * 3}[state]
        clock.now = 1000.0 - age
        entry = cache.store(source, b'{"content":[]}', False, TTL, keep_stale=WINDOW * 2)
        assert entry is not None
        sources[id(entry)] = source
    clock.now = 1000.0
    running = draw(st.booleans())
    room = running and draw(st.booleans())
    return World(lookup, draw(st.booleans()), server, cache, clock, running, room, sources)


TIERS = st.one_of(st.none(), st.builds(TierState, st.booleans(), st.booleans()))


def check_entry(world: World, outcome: Any) -> None:
    """The rule, for an outcome that answers from an entry."""
    entry = outcome.entry
    if id(entry) in world.sources and world.for_everyone(entry):
        assert world.verified, "an entry for every caller answered a context not answered"
    if isinstance(outcome, Refresh | Stale):
        assert world.sources[id(entry)] == "own", "only the request's own key answers stale"
        assert entry.expires_at <= world.clock.now < entry.expires_at + WINDOW


@given(worlds(), TIERS)
def test_memory_answers_only_what_the_rule_lets_it(world: World, tier: TierState | None) -> None:
    lookup = world.lookup
    outcome = choose(lookup, world.verified, world, world.server, world.clock.now, tier)
    if isinstance(outcome, Hit | Refresh):
        check_entry(world, outcome)
    if isinstance(outcome, Hit):
        assert not outcome.from_tier
        assert world.cache.get_fresh(world.sources[id(outcome.entry)]) is outcome.entry
    if isinstance(outcome, Hit) and tier is not None and not tier.listening:
        # Memory alone, while removals may have been missed: only inside a session (never
        # in Redis), with Redis out of reach.
        assert lookup.session
        assert tier.out_of_reach
    if isinstance(outcome, ReadTier):
        assert tier is not None
        assert not lookup.session
        assert outcome.public_side == (bool(lookup.public_key) and world.verified)
    if isinstance(outcome, Refresh):
        assert world.server.cache.stale_while_revalidate
        assert outcome.start == (not world.in_flight)
        assert tier is None or tier.memory_trusted
    if isinstance(outcome, Follow):
        assert world.room
        assert world.verified or not lookup.scope.public, "waited on a call it may not read"
    if isinstance(outcome, Lead):
        # Nobody waits on a call whose context the upstream has not answered.
        unverified = lookup.scope.public and not world.verified
        assert outcome.joinable == (not world.in_flight and not unverified)
    unverified_public = lookup.scope.public and not world.verified
    if unverified_public:
        assert isinstance(outcome, Lead | ReadTier) or (
            isinstance(outcome, Hit) and world.sources[id(outcome.entry)] == "named"
        )


@given(worlds(), TIERS, st.booleans(), st.booleans(), st.booleans())
def test_what_the_tier_held_answers_only_what_the_rule_lets_it(
    world: World, tier: TierState | None, own: bool, public: bool, unreached: bool
) -> None:
    lookup, cache = world.lookup, world.cache
    first = choose(lookup, world.verified, world, world.server, world.clock.now, tier)
    if not isinstance(first, ReadTier):
        return

    def copy(source: str, held: bool) -> Entry | None:
        if not held:
            return None
        entry = cache.make_entry(b'{"content":[]}', False, TTL)
        world.sources[id(entry)] = source
        return entry

    public_held = copy("public", public) if first.public_side else None
    held = Tiered(copy("own", own), public_held, unreached, first.doubted)
    outcome = choose(lookup, world.verified, world, world.server, world.clock.now, tier, held)
    assert not isinstance(outcome, ReadTier | StepAside)
    if isinstance(outcome, Hit):
        check_entry(world, outcome)
        if not outcome.from_tier:  # memory, with Redis out of reach
            assert outcome.entry is first.doubted
            assert held.own is None
            assert unreached


@given(worlds(), TIERS)
def test_a_failure_is_answered_stale_only_by_the_requests_own_readable_entry(
    world: World, tier: TierState | None
) -> None:
    stale = on_failure(world.lookup, world.verified, world, world.server, world.clock.now, tier)
    if stale is not None:
        check_entry(world, stale)
        assert world.server.cache.stale_if_error
        assert tier is None or tier.memory_trusted


@given(worlds())
def test_a_request_that_is_not_looked_up_steps_aside(world: World) -> None:
    bypass = Bypass("method")
    assert choose(bypass, True, world, world.server, 0.0) == StepAside(bypass)
