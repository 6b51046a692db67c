"""Level-triggered reconciliation of one namespace, from the state kept in memory.

The watches (`watching`) keep a record of every MCPServer and managed ConfigMap
(`observed`); a change asks for its namespace to be reconciled. A pass reads those
records, not the API: it renders the namespace's ConfigMap from all its MCPServers,
writes it only when it differs, and writes each status only when it differs. The
operator's own writes come back as watch events; one that changes nothing a pass reads
(its status, its ConfigMap as written) asks for no pass. Because a pass always compares
with the latest state the watches delivered, a hand edit, a missed write or a restart is
corrected by the next one.

One worker per namespace: passes never overlap, and requests that arrive during a pass
or within `batch_window` of the first are folded into one pass. Only the replica that
holds the Lease runs passes (see `leader`), and only once every watch has listed; a
standby keeps its records and passes over every namespace when it takes over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from mcpcache.sidecar.config import Server

from .configmap import (
    CONFIGMAP_NAME,
    MANAGED_BY,
    configmap_of,
    digest,
    hand_edits,
    is_managed,
    render_config,
)
from .crd import RESOURCE_GROUP, RESOURCE_KIND, RESOURCE_PLURAL, RESOURCE_VERSION
from .kubeapi import MERGE_PATCH, ApiError, KubeAPI
from .metrics import OperatorMetrics
from .observed import ConfigMapRecord, ServerRecord
from .resource import Effective, effective_server
from .status import desired_status, same_status

Warn = Callable[..., None]
"""`kopf.warn`'s and `kopf.info`'s signature: (body, *, reason, message); see
`events.EventPoster`."""

logger = logging.getLogger("mcpcache.operator")


class ClusterView(Protocol):
    """The records the watches keep, by namespace (`watching.ClusterState`)."""

    def servers(self, namespace: str) -> Iterable[ServerRecord]: ...
    def configmap(self, namespace: str) -> ConfigMapRecord | None: ...
    def namespaces(self) -> Iterable[str]: ...


@dataclass
class _Rendered:
    key: tuple[Any, ...]
    text: str
    digest: str


@dataclass
class PassResult:
    servers: int = 0
    invalid: int = 0
    clamped: int = 0
    statuses: int = 0
    configmap: str = "unchanged"

    @property
    def wrote(self) -> bool:
        return bool(self.statuses) or self.configmap != "unchanged"


class _Conflict(Exception):
    """Someone wrote the ConfigMap since the watch said; the next event brings it."""


class NamespaceReconciler:
    def __init__(
        self,
        api: KubeAPI,
        metrics: OperatorMetrics,
        warn: Warn,
        inform: Warn,
        batch_window: float = 0.2,
        retry_delay: float = 1.0,
        max_retry_delay: float = 10.0,
    ) -> None:
        self.api = api
        self.metrics = metrics
        self.batch_window = batch_window
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self.warn = warn
        self.inform = inform
        self.view: ClusterView | None = None
        self.leading = False
        self.listed = False
        """Every watch has listed once: the records are complete."""
        self._pending: dict[str, float] = {}
        """Namespaces to pass over, with when the first unhandled change arrived."""
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._seen: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._effective: dict[tuple[str, str], tuple[tuple[Any, ...], Effective]] = {}
        self._rendered: dict[str, _Rendered] = {}
        self._written: dict[str, ConfigMapRecord] = {}
        """The ConfigMaps as this replica last wrote them, until the watch catches up."""
        metrics.pending.set_function(lambda: len(self._pending.keys() | self._workers.keys()))

    # -- what the watches report ------------------------------------------------------

    def server_changed(self, namespace: str, record: ServerRecord, deleted: bool) -> None:
        key = (namespace, record.name)
        if deleted:
            self._seen.pop(key, None)
            self._effective.pop(key, None)
            self.request(namespace)
            return
        previous, self._seen[key] = self._seen.get(key), record.inputs
        if previous != record.inputs:
            self.request(namespace)
            return
        effective = self._effective_of(namespace, record)
        if not same_status(record.status, self._desired_status(record, effective)):
            self.request(namespace)

    def configmap_changed(self, namespace: str, record: ConfigMapRecord | None) -> None:
        mine = self._written.get(namespace)
        if mine is not None and (record is None or not mine.newer_than(record)):
            self._written.pop(namespace)
        rendered = self._rendered.get(namespace)
        if record is None or rendered is None or not record.holds(rendered.text, rendered.digest):
            self.request(namespace)

    # -- scheduling -------------------------------------------------------------------

    def request(self, namespace: str) -> None:
        """Ask for `namespace` to be reconciled soon (cheap; called on every event)."""
        self._pending.setdefault(namespace, time.monotonic())
        if self.active:
            self._start_worker(namespace)

    @property
    def active(self) -> bool:
        return self.leading and self.listed

    def _start_worker(self, namespace: str) -> None:
        if namespace not in self._workers:
            self._workers[namespace] = asyncio.get_running_loop().create_task(self._work(namespace))

    def _pass_everywhere(self) -> None:
        if not self.active:
            return
        now = time.monotonic()
        for namespace in self.view.namespaces() if self.view else ():
            self._pending.setdefault(namespace, now)
        for namespace in list(self._pending):
            self._start_worker(namespace)

    def start_leading(self) -> None:
        """This replica took the Lease: pass over every namespace it knows of."""
        self.leading = True
        self._pass_everywhere()

    def all_listed(self) -> None:
        """Every watch has listed once: passes may start."""
        self.listed = True
        self._pass_everywhere()

    def stop_leading(self) -> None:
        """Passes under way finish; no new one starts."""
        self.leading = False

    async def close(self) -> None:
        for task in self._workers.values():
            task.cancel()
        await asyncio.gather(*self._workers.values(), return_exceptions=True)

    async def _work(self, namespace: str) -> None:
        delay = self.retry_delay
        try:
            await asyncio.sleep(self.batch_window)
            while self.active and namespace in self._pending:
                requested = self._pending.pop(namespace)
                started = time.monotonic()
                self.metrics.reconcile_queue.observe(started - requested)
                try:
                    result = await self.reconcile(namespace)
                except Exception as exc:
                    self.metrics.reconciles.labels("error").inc()
                    level = logging.DEBUG if isinstance(exc, _Conflict) else logging.WARNING
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

    # -- one pass ---------------------------------------------------------------------

    async def reconcile(self, namespace: str) -> PassResult:
        assert self.view is not None, "no records to reconcile from"
        records = sorted(
            (r for r in self.view.servers(namespace) if not r.deleting), key=lambda r: r.name
        )
        plans = [(record, self._effective_of(namespace, record)) for record in records]
        servers = [e.server for _, e in plans if e.server is not None]
        result = PassResult(
            servers=len(servers),
            invalid=len(plans) - len(servers),
            clamped=sum(e.clamped_from is not None for _, e in plans),
        )
        rendered = self._render(namespace, plans, servers)
        result.configmap = await self._write_configmap(namespace, rendered, create=bool(plans))
        written = await asyncio.gather(
            *(self._write_status(namespace, record, effective) for record, effective in plans)
        )
        result.statuses = sum(written)
        self.metrics.servers.labels(namespace).set(result.servers)
        self.metrics.clamped.labels(namespace).set(result.clamped)
        return result

    def _effective_of(self, namespace: str, record: ServerRecord) -> Effective:
        key = (namespace, record.name)
        cached = self._effective.get(key)
        if cached is not None and cached[0] == record.inputs:
            return cached[1]
        effective = effective_server(record.name, record.spec, record.annotations)
        self._effective[key] = (record.inputs, effective)
        return effective

    def _render(
        self,
        namespace: str,
        plans: list[tuple[ServerRecord, Effective]],
        servers: list[Server],
    ) -> _Rendered:
        key = tuple(record.inputs for record, _ in plans)
        rendered = self._rendered.get(namespace)
        if rendered is None or rendered.key != key:
            text = render_config(servers)
            rendered = _Rendered(key, text, digest(text))
            self._rendered[namespace] = rendered
        return rendered

    def _current_configmap(self, namespace: str) -> ConfigMapRecord | None:
        assert self.view is not None
        observed = self.view.configmap(namespace)
        mine = self._written.get(namespace)
        if mine is not None and (observed is None or mine.newer_than(observed)):
            return mine
        return observed

    async def _write_configmap(self, namespace: str, rendered: _Rendered, create: bool) -> str:
        current = self._current_configmap(namespace)
        desired = configmap_of(namespace, rendered.text, rendered.digest)
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        if current is None:
            if not create:
                return "unchanged"
            try:
                created = await self.api.request("POST", "configmaps", path, desired)
            except ApiError as exc:
                if exc.status == 409:
                    raise _Conflict(str(exc)) from exc
                raise
            self._written[namespace] = ConfigMapRecord.from_body(created)
            return "created"
        if not create and not is_managed(current.labels):
            # A ConfigMap of that name the operator never wrote, and no MCPServers.
            return "unchanged"
        if current.holds(rendered.text, rendered.digest):
            return "unchanged"
        edits = hand_edits(current.data, current.labels, current.annotations, rendered.text)
        metadata = desired["metadata"]
        metadata["resourceVersion"] = current.resource_version
        metadata["labels"] = {**current.labels, **MANAGED_BY}
        metadata["annotations"] = {**current.annotations, **metadata["annotations"]}
        try:
            replaced = await self.api.request(
                "PUT", "configmaps", f"{path}/{CONFIGMAP_NAME}", desired
            )
        except ApiError as exc:
            if exc.status in (404, 409):
                raise _Conflict(str(exc)) from exc
            raise
        self._written[namespace] = ConfigMapRecord.from_body(replaced)
        if not edits:
            return "updated"
        reverted = "; ".join(edits)
        logger.warning(
            "configmap edited by hand; put back",
            extra={"namespace": namespace, "reverted": reverted},
        )
        reference = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP_NAME, "namespace": namespace, "uid": current.uid},
        }
        self.warn(
            reference,
            reason="HandEditReverted",
            message=f"{CONFIGMAP_NAME} is written by the mcpcache operator from the namespace's "
            f"MCPServers; reverted: {reverted}. Change the MCPServers instead.",
        )
        return "reverted"

    def _desired_status(self, record: ServerRecord, effective: Effective) -> dict[str, Any]:
        status: dict[str, Any] = desired_status(effective, record.generation, record.status)
        return status

    async def _write_status(
        self, namespace: str, record: ServerRecord, effective: Effective
    ) -> bool:
        current = record.status
        desired = self._desired_status(record, effective)
        if same_status(current, desired):
            return False
        path = (
            f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}/namespaces/{namespace}/"
            f"{RESOURCE_PLURAL}/{record.name}/status"
        )
        try:
            await self.api.request("PATCH", "mcpservers", path, {"status": desired}, MERGE_PATCH)
        except ApiError as exc:
            if exc.status == 404:  # deleted since: its DELETED event asks for a pass
                return False
            raise
        generation = record.generation

        def newly_true(kind: str) -> dict[str, Any] | None:
            """The condition `kind` when it is True now and was not for this generation."""
            was = any(
                c.get("type") == kind
                and c.get("status") == "True"
                and c.get("observedGeneration") == generation
                for c in current.get("conditions", [])
            )
            now = next((c for c in desired["conditions"] if c["type"] == kind), None)
            return now if now is not None and now["status"] == "True" and not was else None

        body = {
            "apiVersion": f"{RESOURCE_GROUP}/{RESOURCE_VERSION}",
            "kind": RESOURCE_KIND,
            "metadata": {"name": record.name, "namespace": namespace, "uid": record.uid},
        }
        for kind in ("MaxSizeClamped", "RulesShadowed"):
            if (condition := newly_true(kind)) is not None:
                self.warn(body, reason=kind, message=condition["message"])
        if effective.server is None:
            self.warn(body, reason="InvalidSpec", message=effective.error or "invalid spec")
        purge = desired.get("lastPurge")
        if purge is not None and purge != current.get("lastPurge"):
            self.inform(
                body,
                reason="PurgePropagated",
                message=f"purge {purge!r} written to the sidecar configuration of namespace "
                f"{namespace}: sidecars drop this server's entries as they reload it",
            )
        return True
