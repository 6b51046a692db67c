"""Which replica reconciles: a coordination.k8s.io Lease, held by one replica at a time.

Every replica serves the injection webhook, which is stateless; only writes to the
cluster (ConfigMaps, statuses) need a single writer. We hold a Lease ourselves rather
than use kopf's peering, having read what peering does (kopf/_core/engines/peering.py,
_core/reactor/orchestration.py, _cogs/clients/watching.py):

- peering is a priority scheme, not an election: operators of equal priority pause
  *all* of themselves ("Possibly conflicting operators with the same priority"), so
  replicas would need distinct priorities, and a restarted pod of higher priority takes
  over from a healthy one at every rollout, starting before the other has paused;
- a dead peer counts as gone only when its `lifetime` (60 s) has passed;
- a paused operator closes its watch streams, so a standby holds no state and must list
  everything again when it takes over;
- it needs two more CRDs and cluster-wide rights to patch them.

kopf's admission server is not gated by that pause either way (it runs beside the
watchers, not under them), so the webhook would have kept answering; the Lease keeps
that and adds the rest: every replica watches and keeps its state in memory (a standby
is warm), takeover needs no listing, a rollout hands the Lease over on SIGTERM, and a
killed leader is replaced one lease duration later. This follows client-go's
leaderelection: expiry is judged by when *this* replica last saw the record change (no
clock comparison between machines), every write is conditional on the resourceVersion,
and a leader that cannot renew within `renew_deadline` stops writing before its Lease
can expire for anyone else: its hold is counted from when it *sent* its last
successful renewal (`remaining`), every attempt is cut off when the hold would end, and
the reconciler's writes are fenced by the same clock.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..metrics import OperatorMetrics
from .api import ApiError, KubeAPI

logger = logging.getLogger("mcpcache.operator")


@dataclass(frozen=True)
class LeaseSettings:
    namespace: str
    name: str
    identity: str
    duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(
        self,
        api: KubeAPI,
        settings: LeaseSettings,
        metrics: OperatorMetrics,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
    ) -> None:
        self.api = api
        self.settings = settings
        self.metrics = metrics
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.path = (
            f"/apis/coordination.k8s.io/v1/namespaces/{settings.namespace}/leases/{settings.name}"
        )
        self.leading = False
        self._renewed = 0.0
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0

    def remaining(self) -> float:
        """Seconds this replica may still write: until `renew_deadline` after the last
        renewal it sent that the API server took; 0 when it does not lead."""
        if not self.leading:
            return 0.0
        return self._renewed + self.settings.renew_deadline - time.monotonic()

    async def run(self) -> None:
        try:
            while True:
                # An attempt the API server does not answer (a cut connection) must not
                # outlast the hold: it ends when the hold does.
                limit = self.remaining() if self.leading else self.settings.duration
                try:
                    # `asyncio.timeout`, not `wait_for`: in Python 3.11 `wait_for` may
                    # swallow a cancel that lands as the attempt ends, and a stopping
                    # leader would go on renewing.
                    async with asyncio.timeout(max(limit, 0.1)):
                        await self._try_once()
                except Exception as exc:  # the API is down, refuses or is silent: again
                    logger.warning("lease: %r", exc, extra={"lease": self.settings.name})
                if self.leading and self.remaining() <= 0:
                    self._step_down("could not renew the lease in time")
                pause = self.settings.retry_period
                if self.leading:  # never sleep past the end of the hold
                    pause = min(pause, max(self.remaining(), 0.0))
                await asyncio.sleep(pause)
        finally:
            if self.leading:
                self._step_down("stopping")
                await self._release()

    def _spec(self, transitions: int, acquired: str | None) -> dict[str, Any]:
        now = _now()
        return {
            "holderIdentity": self.settings.identity,
            "leaseDurationSeconds": max(1, round(self.settings.duration)),
            "acquireTime": acquired or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def _try_once(self) -> None:
        sent = time.monotonic()
        try:
            lease = await self.api.request("GET", "leases", self.path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.settings.name, "namespace": self.settings.namespace},
                "spec": self._spec(0, None),
            }
            path = self.path.rsplit("/", 1)[0]
            await self.api.request("POST", "leases", path, body)
            logger.info("lease created and acquired", extra={"lease": self.settings.name})
            self._renewed = sent
            self._step_up()
            return
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or None
        observed = (holder, spec.get("renewTime"), lease["metadata"].get("resourceVersion"))
        now = time.monotonic()
        if observed != self._observed:
            self._observed, self._observed_at = observed, now
        duration = float(spec.get("leaseDurationSeconds") or self.settings.duration)
        if holder == self.settings.identity:
            new_spec = self._spec(int(spec.get("leaseTransitions") or 0), spec.get("acquireTime"))
        elif holder is None or now - self._observed_at > duration:
            new_spec = self._spec(int(spec.get("leaseTransitions") or 0) + 1, None)
        else:
            if self.leading:
                self._step_down(f"the lease is held by {holder}")
            return
        lease["spec"] = new_spec
        sent = time.monotonic()
        try:
            await self.api.request("PUT", "leases", self.path, lease)
        except ApiError as exc:
            if exc.status == 409:  # someone else wrote first: look again next time
                return
            raise
        self._renewed = sent
        if holder != self.settings.identity:
            logger.info(
                "lease acquired",
                extra={"lease": self.settings.name, "previous": holder or "none"},
            )
        self._step_up()

    def _step_up(self) -> None:
        if not self.leading:
            self.leading = True
            self.metrics.leader.set(1)
            self.on_started()

    def _step_down(self, reason: str) -> None:
        self.leading = False
        self.metrics.leader.set(0)
        logger.info("lease lost: no longer reconciling", extra={"reason": reason})
        self.on_stopped()

    async def _release(self) -> None:
        """Hand the Lease over at once (a rollout, a drain): the standby takes it at its
        next look instead of waiting for it to expire. Read afresh: the last copy this
        replica holds may be older than the Lease (a renewal cut short by the shutdown
        may have been applied), and a write with its resourceVersion would be refused."""
        try:
            async with asyncio.timeout(5):
                await self._release_once()
        except Exception as exc:
            logger.warning("lease: not released: %r", exc, extra={"lease": self.settings.name})

    async def _release_once(self) -> None:
        for _ in range(3):
            lease = await self.api.request("GET", "leases", self.path)
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.settings.identity:
                return
            spec.pop("holderIdentity", None)
            spec["leaseDurationSeconds"] = 1
            try:
                await self.api.request("PUT", "leases", self.path, {**lease, "spec": spec})
            except ApiError as exc:
                if exc.status == 409:  # written since it was read: read again
                    continue
                raise
            logger.info("lease released", extra={"lease": self.settings.name})
            return
