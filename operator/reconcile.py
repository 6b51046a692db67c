"""Level-triggered reconciliation of one namespace, from the records kept in memory.

The records (`state`) hold every MCPServer and managed ConfigMap; a change asks the
queue (`scheduling`) for a pass over its namespace. A pass reads those records, not the API:
it renders the namespace's ConfigMap from all its MCPServers, writes it only when it
differs, and writes each status only when it differs. The operator's own writes come
back as watch events; one that changes nothing a pass reads (its status, its ConfigMap
as written) asks for no pass. Because a pass always compares with the latest state the
watches delivered, a hand edit, a missed write or a restart is corrected by the next one.

Every write goes through a fence: it is sent only while this replica's hold on the
Lease is still good, with a deadline that ends when the hold does, so a leader cut off
from the API server writes nothing once another replica may have taken over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
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
from .crd import API_VERSION, COLLECTION, RESOURCE_KIND, RESOURCE_PLURAL
from .kube.api import MERGE_PATCH, ApiError, KubeAPI
from .metrics import OperatorMetrics
from .records import ConfigMapRecord, ServerRecord
from .resource import ResolvedServer, resolve_server
from .status import desired_status, same_status, status_events

Warn = Callable[..., None]
"""`kopf.warn`'s and `kopf.info`'s signature: (body, *, reason, message); see
`kube.events.EventPoster`."""

logger = logging.getLogger("mcpcache.operator")


class ClusterView(Protocol):
    """The records, by namespace (`state.ClusterState`)."""

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

    quiet = True  # expected: retried, logged at DEBUG (see `scheduling`)


def _no_fence() -> float:
    return float("inf")


class Reconciler:
    def __init__(
        self,
        api: KubeAPI,
        metrics: OperatorMetrics,
        warn: Warn,
        inform: Warn,
        request: Callable[[str], None],
        fence: Callable[[], float] = _no_fence,
    ) -> None:
        """`request` asks for a pass over a namespace (`scheduling.NamespaceQueue.request`);
        `fence` says for how many more seconds this replica may write (`kube.lease`)."""
        self.api = api
        self.metrics = metrics
        self.warn = warn
        self.inform = inform
        self.request = request
        self.fence = fence
        self.view: ClusterView | None = None
        self._seen: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._effective: dict[tuple[str, str], tuple[tuple[Any, ...], ResolvedServer]] = {}
        self._rendered: dict[str, _Rendered] = {}
        self._written: dict[str, ConfigMapRecord] = {}
        """The ConfigMaps as this replica last wrote them, until the watch catches up."""

    # -- what the records report ------------------------------------------------------

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

    async def _write(
        self,
        method: str,
        resource: str,
        path: str,
        body: Mapping[str, Any],
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self.api.request(
            method, resource, path, body, content_type, fence=self.fence
        )
        return result

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

    def _effective_of(self, namespace: str, record: ServerRecord) -> ResolvedServer:
        key = (namespace, record.name)
        cached = self._effective.get(key)
        if cached is not None and cached[0] == record.inputs:
            return cached[1]
        effective = resolve_server(record.name, record.spec, record.annotations)
        self._effective[key] = (record.inputs, effective)
        return effective

    def _render(
        self,
        namespace: str,
        plans: list[tuple[ServerRecord, ResolvedServer]],
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
                created = await self._write("POST", "configmaps", path, desired)
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
            replaced = await self._write("PUT", "configmaps", f"{path}/{CONFIGMAP_NAME}", desired)
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

    def _desired_status(self, record: ServerRecord, effective: ResolvedServer) -> dict[str, Any]:
        status: dict[str, Any] = desired_status(effective, record.generation, record.status)
        return status

    async def _write_status(
        self, namespace: str, record: ServerRecord, effective: ResolvedServer
    ) -> bool:
        current = record.status
        desired = self._desired_status(record, effective)
        if same_status(current, desired):
            return False
        path = f"{COLLECTION}/namespaces/{namespace}/{RESOURCE_PLURAL}/{record.name}/status"
        try:
            await self._write("PATCH", "mcpservers", path, {"status": desired}, MERGE_PATCH)
        except ApiError as exc:
            if exc.status == 404:  # deleted since: its DELETED event asks for a pass
                return False
            raise
        body = {
            "apiVersion": API_VERSION,
            "kind": RESOURCE_KIND,
            "metadata": {"name": record.name, "namespace": namespace, "uid": record.uid},
        }
        for kind, reason, message in status_events(
            current, desired, record.generation, effective, namespace
        ):
            (self.warn if kind == "Warning" else self.inform)(body, reason=reason, message=message)
        return True
