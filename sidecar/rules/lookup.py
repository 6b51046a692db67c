"""Who may read an entry, and what becomes of a request the cache may answer: the one
decision of the request side, as `admission.judgement.judge` is of the answer side.

The rule it keeps is written in `docs/operations/security.md` ("Who may read an
entry"): an entry answers a request only when the request's authorization context is
the one it was stored for (every private key holds that context, `policy.keys`), or
the entry is for every caller and the upstream itself answered the request's context
for that server and tool within the entry's lifetime (`verified`, from
`cache.accepted`). Every way an entry reaches a request goes through here: a fresh
entry in memory or in the shared tier, the entry a call filled from defaults names, an
entry for every caller, a stale entry while it is fetched again or because the upstream
failed, and another request's upstream call still under way (a flight: an entry being
fetched, read by the same rule).

Pure: it reads this sidecar's state through `Reading` (memory and flights, as they are
at the moment it asks, without waiting) and is told the rest; the router does the I/O
and dispatches on the outcome. The shared tier is read over the network, so a lookup
that may need it is decided in two calls: the first says `ReadTier`, the second is
given what the tier held.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from ..cache.entry import Entry
from ..config import Server
from .admission import freshness
from .policy.plan import Bypass, Lookup


class Reading(Protocol):
    """What the decision reads of this sidecar's own state, when it needs it."""

    def fresh(self, key: str) -> Entry | None:
        """The entry under `key` if it has not expired."""

    def stale(self, key: str) -> Entry | None:
        """The entry under `key` if it has expired but is within its stale window."""

    def running(self, key: str) -> bool:
        """Whether an upstream call for `key` is under way."""

    def has_room(self, key: str) -> bool:
        """Whether a request may wait on the call under way for `key`."""


class TierState(NamedTuple):
    """The shared tier as the decision needs it (None: no tier)."""

    listening: bool
    """Every removal other replicas announce reaches this one (`tiers.broadcast`)."""
    out_of_reach: bool
    """Redis is being skipped after failures (the breaker is open)."""

    @property
    def memory_trusted(self) -> bool:
        return self.listening or self.out_of_reach


class Tiered(NamedTuple):
    """What the shared tier held, read after `ReadTier`."""

    own: Entry | None
    """Under the request's own key."""
    public: Entry | None
    """Under its key for every caller (read only when `ReadTier.public_side`)."""
    unreached: bool
    """Redis was out of reach, and nothing was removed meanwhile."""
    doubted: Entry | None
    """As `ReadTier.doubted`."""


class Hit(NamedTuple):
    """Answer from this fresh entry."""

    entry: Entry
    from_tier: bool = False


class Refresh(NamedTuple):
    """Answer from this expired entry now (stale-while-revalidate), and fetch it again
    in the background unless a call for it is under way (`start`)."""

    entry: Entry
    start: bool


class Stale(NamedTuple):
    """Answer from this expired entry: the upstream failed (stale-if-error)."""

    entry: Entry


class Follow(NamedTuple):
    """Wait for the identical call under way, and take its answer."""


class Lead(NamedTuple):
    """Go upstream in a call of this request's own; `joinable`: others may wait on it."""

    joinable: bool


class StepAside(NamedTuple):
    """Forward the request untouched; its answer is not stored."""

    plan: Bypass


class ReadTier(NamedTuple):
    """Read the shared tier under the request's key (and its key for every caller when
    `public_side` and the own key holds nothing), then decide again with `Tiered`.
    `doubted`: a fresh entry memory holds but may not answer alone (removals by other
    replicas may have been missed): it answers if Redis is out of reach."""

    public_side: bool
    doubted: Entry | None


Outcome = Hit | Refresh | Stale | Follow | Lead | StepAside | ReadTier


def choose(
    plan: Bypass | Lookup,
    verified: bool,
    reading: Reading,
    server: Server,
    now: float,
    tier: TierState | None = None,
    tiered: Tiered | None = None,
) -> Outcome:
    """What happens to this request. `verified`: the upstream answered its authorization
    context lately (`cache.accepted`); `tiered`: what the shared tier held, once read."""
    if isinstance(plan, Bypass):
        return StepAside(plan)
    # An entry for every caller answers only a context the upstream answered.
    unverified = plan.scope.public and not verified
    if tiered is None:
        entry = None if unverified else reading.fresh(plan.key)
        if entry is None and plan.named_key:  # a call filled from defaults
            entry = reading.fresh(plan.named_key)
        if entry is None and plan.public_key and verified:  # trustPublicHints
            entry = reading.fresh(plan.public_key)
        if entry is not None and (tier is None or tier.listening):
            return Hit(entry)
        # Removals by other replicas may have been missed: Redis answers instead where
        # it can. Answers given inside a legacy session end with it: never in Redis.
        if plan.session:
            if entry is not None and tier is not None and tier.out_of_reach:
                return Hit(entry)
        elif tier is not None:
            return ReadTier(bool(plan.public_key) and verified, entry)
    else:
        if tiered.doubted is not None and tiered.own is None and tiered.unreached:
            return Hit(tiered.doubted)  # Redis out of reach: memory is all there is
        found = None if unverified else tiered.own
        if found is None and verified:
            found = tiered.public
        if found is not None:
            return Hit(found, from_tier=True)
    return _miss(plan, unverified, reading, server, now, tier)


def _miss(
    plan: Lookup,
    unverified: bool,
    reading: Reading,
    server: Server,
    now: float,
    tier: TierState | None,
) -> Outcome:
    """A request no fresh entry may answer: a stale entry while it is fetched again, the
    identical call under way, or a call of its own. A request whose context the upstream
    has not answered goes up on its own, and nobody waits on it: its call may fail, or
    be refused, where theirs would not."""
    key = plan.key
    if unverified:
        return Lead(joinable=False)
    stale = _stale(key, reading, tier)
    if stale is not None and freshness.stale_while_revalidating(server, stale.expires_at, now):
        return Refresh(stale, start=not reading.running(key))
    if reading.has_room(key):
        return Follow()
    # A flight with no room left keeps its followers; this request goes on its own.
    return Lead(joinable=not reading.running(key))


def on_failure(
    plan: Lookup,
    verified: bool,
    reading: Reading,
    server: Server,
    now: float,
    tier: TierState | None = None,
) -> Stale | None:
    """The stale entry that answers a request whose upstream call failed (or whose
    flight's did), or None: the failure is the answer."""
    if plan.scope.public and not verified:
        return None  # an entry for every caller: not for a context not answered
    entry = _stale(plan.key, reading, tier)
    if entry is None or not freshness.stale_on_error(server, entry.expires_at, now):
        return None
    return Stale(entry)


def _stale(key: str, reading: Reading, tier: TierState | None) -> Entry | None:
    """The expired entry kept for `key`, unless removals by other replicas may have been
    missed and Redis can be asked instead: Redis keeps no expired entries, so the answer
    then comes from upstream."""
    if tier is not None and not tier.memory_trusted:
        return None
    return reading.stale(key)
