"""Level-triggered reconciliation of one namespace.

Any change to an MCPServer, or to the managed ConfigMap, asks for its namespace to be
reconciled. Reconciling reads every MCPServer there, writes the ConfigMap from all of
them, and updates each one's status. It always starts from what the API server holds
now, so a missed event, a hand edit or an operator restart is corrected by the next
pass. One worker per namespace: passes never overlap, and requests that arrive during a
pass are folded into one more pass.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Mapping
from typing import Any, Final

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mcpcache.sidecar.config import Server

from .configmap import CONFIGMAP_NAME, MANAGED_BY, configmap_body
from .metrics import OperatorMetrics
from .resource import Effective, effective_server
from .status import desired_status, same_status

GROUP: Final = "mcpcache.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "mcpservers"
KIND: Final = "MCPServer"

logger = logging.getLogger("mcpcache.operator")


class NamespaceReconciler:
    def __init__(
        self,
        api: client.ApiClient,
        metrics: OperatorMetrics,
        retry_delay: float = 1.0,
        max_retry_delay: float = 10.0,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.metrics = metrics
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self._pending: set[str] = set()
        self._workers: dict[str, asyncio.Task[None]] = {}

    def request(self, namespace: str) -> None:
        """Ask for `namespace` to be reconciled soon (cheap; call on every event)."""
        self._pending.add(namespace)
        if namespace not in self._workers:
            self._workers[namespace] = asyncio.create_task(self._work(namespace))

    async def close(self) -> None:
        for task in self._workers.values():
            task.cancel()
        await asyncio.gather(*self._workers.values(), return_exceptions=True)

    async def _work(self, namespace: str) -> None:
        delay = self.retry_delay
        try:
            while namespace in self._pending:
                self._pending.discard(namespace)
                started = time.perf_counter()
                try:
                    await asyncio.to_thread(self.reconcile, namespace)
                except Exception as exc:
                    self.metrics.reconciles.labels("error").inc()
                    logger.warning(
                        "reconcile failed; retrying",
                        extra={"namespace": namespace, "error": str(exc), "retry_in": delay},
                    )
                    self._pending.add(namespace)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self.max_retry_delay)
                    continue
                delay = self.retry_delay
                self.metrics.reconciles.labels("ok").inc()
                self.metrics.reconcile_duration.observe(time.perf_counter() - started)
        finally:
            self._workers.pop(namespace, None)

    def reconcile(self, namespace: str) -> None:
        listing: dict[str, Any] = self.custom.list_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, namespace, PLURAL
        )
        items = [i for i in listing["items"] if not i["metadata"].get("deletionTimestamp")]
        plans = [
            (
                item,
                effective_server(
                    item["metadata"]["name"],
                    item.get("spec") or {},
                    item["metadata"].get("annotations"),
                ),
            )
            for item in items
        ]
        servers = [e.server for _, e in plans if e.server is not None]
        self._write_configmap(namespace, servers, create=bool(items))
        for item, effective in plans:
            self._write_status(namespace, item, effective)
        self.metrics.servers.labels(namespace).set(len(servers))
        self.metrics.clamped.labels(namespace).set(
            sum(e.clamped_from is not None for _, e in plans)
        )
        logger.info("reconciled", extra={"namespace": namespace, "servers": len(servers)})

    def _write_configmap(self, namespace: str, servers: list[Server], create: bool) -> None:
        desired = configmap_body(namespace, servers)
        try:
            current = self.core.read_namespaced_config_map(CONFIGMAP_NAME, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            if create:
                self.core.create_namespaced_config_map(namespace, desired)
                logger.info("configmap created", extra={"namespace": namespace})
            return
        metadata = current.metadata or client.V1ObjectMeta()
        labels = metadata.labels or {}
        if current.data == desired["data"] and all(
            labels.get(k) == v for k, v in MANAGED_BY.items()
        ):
            return
        desired["metadata"]["resourceVersion"] = metadata.resource_version
        desired["metadata"]["labels"] = {**labels, **MANAGED_BY}
        self.core.replace_namespaced_config_map(CONFIGMAP_NAME, namespace, desired)
        logger.info("configmap updated", extra={"namespace": namespace})

    def _write_status(self, namespace: str, item: Mapping[str, Any], effective: Effective) -> None:
        metadata = item["metadata"]
        current = item.get("status") or {}
        desired = desired_status(effective, metadata.get("generation", 0), current)
        if same_status(current, desired):
            return
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, metadata["name"], {"status": desired}
        )
        generation = metadata.get("generation")

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

        for kind in ("MaxSizeClamped", "RulesShadowed"):
            if (condition := newly_true(kind)) is not None:
                self._event(namespace, metadata, kind, condition["message"])
        if effective.server is None:
            self._event(namespace, metadata, "InvalidSpec", effective.error or "invalid spec")
        purge = desired.get("lastPurge")
        if purge is not None and purge != current.get("lastPurge"):
            self._event(
                namespace,
                metadata,
                "PurgePropagated",
                f"purge {purge!r} written to the sidecar configuration of namespace "
                f"{namespace}: sidecars drop this server's entries as they reload it",
                kind="Normal",
            )

    def _event(
        self,
        namespace: str,
        metadata: Mapping[str, Any],
        reason: str,
        message: str,
        kind: str = "Warning",
    ) -> None:
        now = datetime.datetime.now(datetime.UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{metadata['name']}."),
            involved_object=client.V1ObjectReference(
                api_version=f"{GROUP}/{VERSION}",
                kind=KIND,
                name=metadata["name"],
                namespace=namespace,
                uid=metadata.get("uid"),
                resource_version=metadata.get("resourceVersion"),
            ),
            reason=reason,
            message=message,
            type=kind,
            source=client.V1EventSource(component="mcpcache-operator"),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        self.core.create_namespaced_event(namespace, event)
