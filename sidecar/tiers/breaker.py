"""The shared tier's circuit breaker: a failing Redis is left alone, then probed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Literal

FAILURES_TO_OPEN: Final = 3

State = Literal["closed", "open", "half_open"]


class Breaker:
    """Closed: operations run. `FAILURES_TO_OPEN` failures in a row open it: operations
    are skipped for `pause` seconds, after which one operation may run (half open); its
    success closes the breaker, its failure opens it again.

    One breaker for the whole tier, in every mode: with Redis Cluster, a shard that
    fails opens it for all shards until the probe succeeds. A request then goes to memory
    and upstream, which is what it does without a tier; a per-shard breaker would keep
    the surviving shards' hits, at the cost of state per node that follows the topology."""

    def __init__(
        self,
        pause: float,
        failures: int = FAILURES_TO_OPEN,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[State], None] | None = None,
    ) -> None:
        self.pause = pause
        self.failures = failures
        self.clock = clock
        self.on_change = on_change
        self.state: State = "closed"
        self._failed = 0
        self._since = 0.0

    def allow(self) -> bool:
        if self.state == "closed":
            return True
        if self.clock() < self._since + self.pause:
            return False
        # A pause has passed since the breaker opened, or since a probe began that never
        # reported back (its request was cancelled): let one operation probe.
        self._since = self.clock()
        self._set("half_open")
        return True

    def success(self) -> None:
        self._failed = 0
        self._set("closed")

    def failure(self) -> None:
        self._failed += 1
        if self.state == "half_open" or self._failed >= self.failures:
            self._since = self.clock()
            self._set("open")

    def _set(self, state: State) -> None:
        if state != self.state:
            self.state = state
            if self.on_change is not None:
                self.on_change(state)


class Failed:
    """An operation that did not happen; `label` is how the metrics count it."""

    def __init__(self, label: str) -> None:
        self.label = label


FAILED: Final = Failed("error")
"""Tried, and Redis failed or did not answer in time."""
SKIPPED: Final = Failed("skipped")
"""Not tried: the breaker was open."""
POOL_FULL: Final = Failed("pool_full")
"""Not tried: every place for an operation was taken (a burst, not Redis's fault)."""
