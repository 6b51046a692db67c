"""A clock the test moves by hand, for the pure modules that take one (the store, the
breaker, session ids): time passes exactly as the test says, with no waiting."""

from __future__ import annotations


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
