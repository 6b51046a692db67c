"""kopf registrations: the thin layer between watch events and the operator's logic."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import kopf

from mcpcache.sidecar.config import RESOURCE_GROUP, RESOURCE_PLURAL, RESOURCE_VERSION

from .configmap import CONFIGMAP_NAME
from .injection import INJECT_LABEL, InjectionRefused, plan_injection, wants_sidecar
from .metrics import OperatorMetrics
from .observed import ConfigMapRecord, ServerRecord
from .reconcile import NamespaceReconciler
from .settings import OperatorSettings

INJECT_HANDLER_ID = "inject-sidecar"

logger = logging.getLogger("mcpcache.operator")


class IndexView:
    """The reconciler's view of kopf's indexes (both keyed by namespace)."""

    def __init__(self, servers: kopf.Index[str, Any], configmaps: kopf.Index[str, Any]) -> None:
        self._servers = servers
        self._configmaps = configmaps

    def servers(self, namespace: str) -> Iterable[ServerRecord]:
        return self._servers.get(namespace, ())

    def configmap(self, namespace: str) -> ConfigMapRecord | None:
        return next(iter(self._configmaps.get(namespace, ())), None)

    def namespaces(self) -> Iterable[str]:
        return {*self._servers, *self._configmaps}


def build_registry(
    reconciler: NamespaceReconciler, settings: OperatorSettings, metrics: OperatorMetrics
) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    # The records a pass reads (see `observed`). kopf fills indexes from its initial
    # listing before it calls any other handler, so no pass ever runs on half a listing
    # (after a restart, that would rewrite ConfigMaps with servers missing).
    @kopf.index(
        RESOURCE_GROUP, RESOURCE_VERSION, RESOURCE_PLURAL, id="mcpservers", registry=registry
    )
    async def mcpservers(namespace: str | None, body: kopf.Body, **_: Any) -> Any:
        return {namespace: ServerRecord.from_body(body)} if namespace else None

    # Watched with a field selector on the name (see cli.configure_kopf), so the rights
    # on this one name are enough. A hand edit (or deletion) is put back.
    @kopf.index("v1", "configmaps", id="configmaps", registry=registry)
    async def configmaps(namespace: str | None, name: str | None, body: kopf.Body, **_: Any) -> Any:
        if namespace and name == CONFIGMAP_NAME:
            return {namespace: ConfigMapRecord.from_body(body)}
        return None

    @kopf.on.startup(registry=registry)
    async def attach_indexes(**kwargs: Any) -> None:
        reconciler.view = IndexView(kwargs["mcpservers"], kwargs["configmaps"])

    @kopf.on.event(RESOURCE_GROUP, RESOURCE_VERSION, RESOURCE_PLURAL, registry=registry)
    async def mcpserver_event(
        type: str | None, namespace: str | None, body: kopf.Body, **_: Any
    ) -> None:
        if namespace:
            record = ServerRecord.from_body(body)
            reconciler.server_changed(namespace, record, deleted=type == "DELETED")

    @kopf.on.event("v1", "configmaps", registry=registry)
    async def configmap_event(
        type: str | None, namespace: str | None, name: str | None, body: kopf.Body, **_: Any
    ) -> None:
        if namespace and name == CONFIGMAP_NAME:
            record = None if type == "DELETED" else ConfigMapRecord.from_body(body)
            reconciler.configmap_changed(namespace, record)

    @kopf.on.mutate(
        "v1",
        "pods",
        id=INJECT_HANDLER_ID,
        operations=["CREATE"],
        registry=registry,
    )
    async def inject_sidecar(body: kopf.Body, patch: kopf.Patch, dryrun: bool, **_: Any) -> None:
        pod = dict(body)
        if not wants_sidecar(pod):
            metrics.admissions.labels("not_requested").inc()
            return
        try:
            plan = plan_injection(pod, settings)
        except InjectionRefused as exc:
            metrics.admissions.labels("refused").inc()
            metadata = pod.get("metadata") or {}
            logger.info(
                "pod refused: it cannot take the sidecar",
                extra={
                    "namespace": metadata.get("namespace"),
                    "pod": metadata.get("name") or metadata.get("generateName"),
                    "reason": str(exc),
                },
            )
            raise kopf.AdmissionError(
                f"{INJECT_LABEL}: cannot inject the mcpcache sidecar: {exc}", code=400
            ) from exc
        if plan is None:
            metrics.admissions.labels("already_injected").inc()
            return
        for field, value in plan.items():
            patch.spec[field] = value
        metrics.admissions.labels("dry_run" if dryrun else "injected").inc()

    return registry
