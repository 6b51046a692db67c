"""What one sidecar learns from the traffic it proxies, in one place: the tools its
servers' listings described, the legacy sessions it saw opened and their openers, the
authorization contexts the upstreams answered, and what answers and writes showed for
`suggest`. Made once at assembly and handed to those that read or add to it, so that
each piece has one owner and a reader finds them all here."""

from __future__ import annotations

from dataclasses import dataclass

from ..cache.accepted import AcceptedContexts
from ..cache.observations import Observations
from ..cache.store import ResponseCache
from ..rules.learned_tools import LearnedTools
from ..upstream.sessions import LegacySessions


@dataclass(frozen=True, slots=True)
class Learned:
    tools: LearnedTools
    sessions: LegacySessions
    accepted: AcceptedContexts
    observations: Observations

    @classmethod
    def new(cls, cache: ResponseCache) -> Learned:
        """Nothing learned yet, for a sidecar whose cache is `cache` (sessions drop
        their entries from it when they end; acceptances run on its clock)."""
        return cls(
            LearnedTools(), LegacySessions(cache), AcceptedContexts(cache.timer), Observations()
        )
