"""kopf registrations: the injection webhook, a thin layer over `injection`."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from .injection import (
    INJECT_LABEL,
    InjectionRefused,
    injected_annotations,
    plan_injection,
    wants_sidecar,
)
from .metrics import OperatorMetrics
from .settings import OperatorSettings

INJECT_HANDLER_ID = "inject-sidecar"

logger = logging.getLogger("mcpcache.operator")


def build_registry(settings: OperatorSettings, metrics: OperatorMetrics) -> kopf.OperatorRegistry:
    """kopf serves the injection webhook; the operator watches and reconciles on its own
    (see `watching` for why)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

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
        for key, value in injected_annotations(plan).items():
            patch.metadata.annotations[key] = value
        metrics.admissions.labels("dry_run" if dryrun else "injected").inc()

    return registry
