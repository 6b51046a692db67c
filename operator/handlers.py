"""kopf registrations: the thin layer between watch events and the operator's logic."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from mcpcache.sidecar.config import RESOURCE_GROUP, RESOURCE_PLURAL, RESOURCE_VERSION

from .configmap import CONFIGMAP_NAME
from .injection import INJECT_LABEL, InjectionRefused, plan_injection, wants_sidecar
from .metrics import OperatorMetrics
from .reconcile import NamespaceReconciler
from .settings import OperatorSettings

INJECT_HANDLER_ID = "inject-sidecar"

logger = logging.getLogger("mcpcache.operator")


def build_registry(
    reconciler: NamespaceReconciler, settings: OperatorSettings, metrics: OperatorMetrics
) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    @kopf.on.event(RESOURCE_GROUP, RESOURCE_VERSION, RESOURCE_PLURAL, registry=registry)
    async def mcpserver_event(namespace: str | None, **_: Any) -> None:
        if namespace:
            reconciler.request(namespace)

    # Watched with a field selector on the name (see cli.configure_kopf), so the rights
    # on this one name are enough. A hand edit (or deletion) is put back.
    @kopf.on.event("v1", "configmaps", registry=registry)
    async def configmap_event(namespace: str | None, name: str | None, **_: Any) -> None:
        if namespace and name == CONFIGMAP_NAME:
            reconciler.request(namespace)

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
