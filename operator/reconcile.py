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
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mcpcache.sidecar.config import (
    RESOURCE_GROUP,
    RESOURCE_KIND,
    RESOURCE_PLURAL,
    RESOURCE_VERSION,
    Server,
)

from .configmap import (
    CONFIG_KEY,
    CONFIGMAP_NAME,
    MANAGED_BY,
    configmap_body,
    hand_edits,
    is_managed,
)
from .metrics import OperatorMetrics
from .resource import Effective, effective_server
from .status import desired_status, same_status

API_TIMEOUT = 30.0
"""Seconds any one API call may take before it is retried by the next pass."""

Warn = Callable[..., None]
"""`kopf.warn`'s and `kopf.info`'s signature: (body, *, reason, message). Events are
posted by kopf."""

logger = logging.getLogger("mcpcache.operator")


class NamespaceReconciler:
    def __init__(
        self,
        api: client.ApiClient,
        metrics: OperatorMetrics,
        retry_delay: float = 1.0,
        max_retry_delay: float = 10.0,
        warn: Warn = kopf.warn,
        inform: Warn = kopf.info,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.metrics = metrics
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self.warn = warn
        self.inform = inform
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
            RESOURCE_GROUP,
            RESOURCE_VERSION,
            namespace,
            RESOURCE_PLURAL,
            _request_timeout=API_TIMEOUT,
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
        logger.debug("reconciled", extra={"namespace": namespace, "servers": len(servers)})

    def _write_configmap(self, namespace: str, servers: list[Server], create: bool) -> None:
        desired = configmap_body(namespace, servers)
        try:
            current = self.core.read_namespaced_config_map(
                CONFIGMAP_NAME, namespace, _request_timeout=API_TIMEOUT
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            if create:
                self.core.create_namespaced_config_map(
                    namespace, desired, _request_timeout=API_TIMEOUT
                )
                logger.info("configmap created", extra={"namespace": namespace})
            return
        metadata = current.metadata or client.V1ObjectMeta()
        labels = metadata.labels or {}
        if not create and not is_managed(labels):
            return  # a ConfigMap of that name the operator never wrote, and no MCPServers
        annotations = metadata.annotations or {}
        wanted = desired["metadata"]
        if (
            current.data == desired["data"]
            and is_managed(labels)
            and all(annotations.get(k) == v for k, v in wanted["annotations"].items())
        ):
            return
        edits = hand_edits(current.data, labels, annotations, desired["data"][CONFIG_KEY])
        wanted["resourceVersion"] = metadata.resource_version
        wanted["labels"] = {**labels, **MANAGED_BY}
        wanted["annotations"] = {**annotations, **wanted["annotations"]}
        replaced = self.core.replace_namespaced_config_map(
            CONFIGMAP_NAME, namespace, desired, _request_timeout=API_TIMEOUT
        )
        if not edits:
            logger.info("configmap updated", extra={"namespace": namespace})
            return
        reverted = "; ".join(edits)
        logger.warning(
            "configmap edited by hand; put back",
            extra={"namespace": namespace, "reverted": reverted},
        )
        reference = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": CONFIGMAP_NAME,
                "namespace": namespace,
                "uid": (replaced.metadata or metadata).uid,
            },
        }
        self.warn(
            reference,
            reason="HandEditReverted",
            message=f"{CONFIGMAP_NAME} is written by the mcpcache operator from the namespace's "
            f"MCPServers; reverted: {reverted}. Change the MCPServers instead.",
        )

    def _write_status(self, namespace: str, item: Mapping[str, Any], effective: Effective) -> None:
        metadata = item["metadata"]
        current = item.get("status") or {}
        desired = desired_status(effective, metadata.get("generation", 0), current)
        if same_status(current, desired):
            return
        self.custom.patch_namespaced_custom_object_status(
            RESOURCE_GROUP,
            RESOURCE_VERSION,
            namespace,
            RESOURCE_PLURAL,
            metadata["name"],
            {"status": desired},
            _request_timeout=API_TIMEOUT,
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

        body = {
            "apiVersion": f"{RESOURCE_GROUP}/{RESOURCE_VERSION}",
            "kind": RESOURCE_KIND,
            "metadata": {**metadata, "namespace": namespace},
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
