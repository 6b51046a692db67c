"""Which namespaces to pass over, and when: one worker per namespace.

Passes over one namespace never overlap, and requests that arrive during a pass or
within `batch_window` of the first are folded into one pass: a burst of ten events in a
namespace costs one pass, not ten. Passes run only on the replica that holds the Lease
(see `kube.lease`) and only once every listing is complete, so that no pass runs on half
a listing (after a restart that would rewrite ConfigMaps with servers missing); a
standby keeps its records and passes over every namespace when it takes over. A failed
pass is retried with a growing delay.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from .metrics import OperatorMetrics

logger = logging.getLogger("mcpcache.operator")


class Outcome(Protocol):
    @property
    def wrote(self) -> bool: ...


async def _nothing_to_pass(namespace: str) -> Outcome:
    raise RuntimeError(f"no pass to run over {namespace}")


class NamespaceQueue:
    def __init__(
        self,
        metrics: OperatorMetrics,
        batch_window: float = 0.2,
        retry_delay: float = 1.0,
        max_retry_delay: float = 10.0,
    ) -> None:
        self.run_pass: Callable[[str], Awaitable[Outcome]] = _nothing_to_pass
        """One pass over a namespace (`reconcile.Reconciler.reconcile`)."""
        self.namespaces: Callable[[], Iterable[str]] = tuple
        """The namespaces there are records of (`state.ClusterState.namespaces`)."""
        self.metrics = metrics
        self.batch_window = batch_window
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self.leading = False
        self.listed = False
        """Every listing is complete: the records are whole."""
        self._pending: dict[str, float] = {}
        """Namespaces to pass over, with when the first unhandled change arrived."""
        self._workers: dict[str, asyncio.Task[None]] = {}
        metrics.pending.set_function(lambda: len(self._pending.keys() | self._workers.keys()))

    def request(self, namespace: str) -> None:
        """Ask for `namespace` to be reconciled soon (cheap; called on every event)."""
        self._pending.setdefault(namespace, time.monotonic())
        if self.active:
            self._start_worker(namespace)

    @property
    def active(self) -> bool:
        return self.leading and self.listed

    def start_leading(self) -> None:
        """This replica took the Lease: pass over every namespace it knows of."""
        self.leading = True
        self._pass_everywhere()

    def all_listed(self) -> None:
        """Every listing is complete: passes may start."""
        self.listed = True
        self._pass_everywhere()

    def stop_leading(self) -> None:
        """No new pass starts; passes under way stop at their next write (see
        `reconcile`'s fence)."""
        self.leading = False

    async def close(self) -> None:
        for task in self._workers.values():
            task.cancel()
        await asyncio.gather(*self._workers.values(), return_exceptions=True)

    def _start_worker(self, namespace: str) -> None:
        if namespace not in self._workers:
            self._workers[namespace] = asyncio.get_running_loop().create_task(self._work(namespace))

    def _pass_everywhere(self) -> None:
        if not self.active:
            return
        now = time.monotonic()
        for namespace in self.namespaces():
            self._pending.setdefault(namespace, now)
        for namespace in list(self._pending):
            self._start_worker(namespace)

    async def _work(self, namespace: str) -> None:
        delay = self.retry_delay
        try:
            await asyncio.sleep(self.batch_window)
            while self.active and namespace in self._pending:
                requested = self._pending.pop(namespace)
                started = time.monotonic()
                self.metrics.reconcile_queue.observe(started - requested)
                try:
                    result = await self.run_pass(namespace)
                except Exception as exc:
                    self.metrics.reconciles.labels("error").inc()
                    # A failure a pass marks `quiet` is expected (a conflict the next event
                    # resolves, a lost Lease): retried, logged at DEBUG.
                    level = logging.DEBUG if getattr(exc, "quiet", False) else logging.WARNING
                    logger.log(
                        level,
                        "reconcile failed; retrying",
                        extra={"namespace": namespace, "error": str(exc), "retry_in": delay},
                    )
                    self._pending.setdefault(namespace, requested)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self.max_retry_delay)
                    continue
                delay = self.retry_delay
                self.metrics.reconciles.labels("ok").inc()
                self.metrics.reconcile_duration.observe(time.monotonic() - started)
                logger.log(
                    logging.INFO if result.wrote else logging.DEBUG,
                    "reconciled",
                    extra={"namespace": namespace, **vars(result)},
                )
        finally:
            self._workers.pop(namespace, None)
