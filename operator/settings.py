"""The operator's own settings, from the environment (the Helm chart sets them)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Final, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from mcpcache.sidecar.config import DEFAULT_LISTEN_PORT as SIDECAR_LISTEN_PORT
from mcpcache.sidecar.config import DEFAULT_METRICS_PORT as SIDECAR_METRICS_PORT
from mcpcache.sidecar.config.errors import problem
from mcpcache.sidecar.config.tracing import endpoint_problem

__all__ = ["SIDECAR_LISTEN_PORT", "SIDECAR_METRICS_PORT", "OperatorSettings"]


def _default_resources() -> dict[str, Any]:
    return {
        "requests": {"cpu": "50m", "memory": "96Mi"},
        "limits": {"memory": "192Mi"},
    }


class OperatorSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    sidecar_image: str = "ghcr.io/mcpcache/mcpcache:0.1.0"
    sidecar_image_pull_policy: str = "IfNotPresent"
    sidecar_resources: dict[str, Any] = Field(default_factory=_default_resources)
    sidecar_log_level: str = "INFO"
    sidecar_cache_max_entries: int | None = None
    sidecar_cache_max_bytes: str | None = None
    """The injected sidecars' shared cache budget; None keeps the sidecar's default."""
    sidecar_shared_cache_url: str | None = None
    """The Redis every injected sidecar uses as its shared tier; None: memory only."""
    sidecar_shared_cache_cluster_nodes: tuple[str, ...] = ()
    """Or a Redis Cluster's seed nodes (`redis://host:port`, ...)."""
    sidecar_shared_cache_sentinel_nodes: tuple[str, ...] = ()
    """Or the sentinels of a Sentinel-managed primary, with its name below."""
    sidecar_shared_cache_sentinel_master: str | None = None
    sidecar_shared_cache_timeout: str | None = None
    sidecar_shared_cache_namespaces: tuple[str, ...] = ()
    """Namespaces whose sidecars use the shared tier; empty means every namespace."""
    sidecar_shared_cache_secret: str | None = None
    """A Secret of this name in the pod's namespace holds `password` (and optionally
    `username`) for Redis."""
    sidecar_run_as_user: int | None = Field(default=65532, ge=1)
    """The injected sidecar's user and group id (the image's user); None: left to the
    platform, as OpenShift's restricted-v2 assigns one per namespace. The chart's
    `securityContext.runAsUser`; `MCPCACHE_SIDECAR_RUN_AS_USER=null` says None."""
    injection_image_pull_secrets: tuple[str, ...] = ()
    """Secrets added to every injected pod's imagePullSecrets, beside its own, so that
    the sidecar's image can come from a private registry (`injection.imagePullSecrets`)."""
    sidecar_tracing_enabled: bool = False
    """Whether injected sidecars send spans; a pod may say otherwise (`pod_annotations`)."""
    sidecar_tracing_endpoint: str | None = None
    """The OTLP/HTTP collector injected sidecars send spans to; None: the exporter's
    default (`http://localhost:4318`, a collector in the pod)."""
    sidecar_tracing_sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)
    """The share of the traces that start at a sidecar that it keeps."""
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty means the whole cluster."""
    metrics_port: int = 8080
    health_port: int = 8081
    webhook_port: int = 9443
    webhook_cert: str | None = None
    webhook_key: str | None = None
    lease_namespace: str = "default"
    lease_name: str = "mcpcache-operator"
    lease_duration: float = 15.0
    lease_renew_deadline: float = 10.0
    lease_retry_period: float = 2.0
    """The Lease that decides which replica reconciles (see `leader`); the chart puts it
    in the release's namespace."""
    missed_scan_interval: float = Field(default=30.0, gt=0)
    """Seconds between scans for pods that missed injection (`kube.pods`)."""
    identity: str = ""
    """This replica's name in the Lease (the pod's name); empty: host, pid and a nonce."""

    @model_validator(mode="after")
    def _one_place_for_redis(self) -> Self:
        """At most one of a URL, cluster nodes or sentinel nodes, refused at start-up
        rather than in every injected pod (whose sidecar would refuse it too)."""
        given = [
            name
            for name, value in (
                ("url", self.sidecar_shared_cache_url),
                ("cluster", self.sidecar_shared_cache_cluster_nodes),
                ("sentinel", self.sidecar_shared_cache_sentinel_nodes),
            )
            if value
        ]
        if len(given) > 1:
            raise ValueError(
                "sidecar.sharedCache needs at most one of url, cluster or sentinel "
                f"(found {' and '.join(given)})"
            )
        if (
            self.sidecar_shared_cache_sentinel_nodes
            and not self.sidecar_shared_cache_sentinel_master
        ):
            raise ValueError("sidecar.sharedCache.sentinel needs the primary's name (master)")
        return self

    @field_validator("sidecar_run_as_user", mode="before")
    @classmethod
    def _platform_user(cls, value: object) -> object:
        return None if value in ("null", "none") else value

    @field_validator("sidecar_tracing_endpoint")
    @classmethod
    def _collector_url(cls, value: str | None) -> str | None:
        """Refused at start-up rather than found as spans that never arrive."""
        if value and (complaint := endpoint_problem(value)):
            raise ValueError(f"{value!r} is not allowed: {complaint}")
        return value or None

    @model_validator(mode="after")
    def _renewal_before_expiry(self) -> Self:
        """A leader that cannot renew must stop writing before its Lease expires and a
        standby takes it: with renewDeadline >= leaseDuration two replicas could write."""
        if not 0 < self.lease_retry_period < self.lease_renew_deadline < self.lease_duration:
            raise ValueError(
                f"{ENVIRONMENT['lease_renew_deadline']}: {self.lease_renew_deadline:g} is not "
                f"allowed: it must be below {ENVIRONMENT['lease_duration']} "
                f"({self.lease_duration:g}) and above {ENVIRONMENT['lease_retry_period']} "
                f"({self.lease_retry_period:g})"
            )
        return self

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> OperatorSettings:
        """The settings the environment gives, or a ValueError with one line per problem,
        each naming its variable (`MCPCACHE_LEASE_DURATION: 'soon' is not allowed: ...`)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        simple = {variable: field for field, variable in ENVIRONMENT.items()}
        for variable, field in simple.items():
            if variable in env and env[variable] != "":
                values[field] = env[variable]
        if resources := env.get("MCPCACHE_SIDECAR_RESOURCES"):
            values["sidecar_resources"] = json.loads(resources)
        for variable, field in (
            ("MCPCACHE_NAMESPACES", "namespaces"),
            ("MCPCACHE_SIDECAR_SHARED_CACHE_NAMESPACES", "sidecar_shared_cache_namespaces"),
            ("MCPCACHE_SIDECAR_SHARED_CACHE_CLUSTER_NODES", "sidecar_shared_cache_cluster_nodes"),
            ("MCPCACHE_SIDECAR_SHARED_CACHE_SENTINEL_NODES", "sidecar_shared_cache_sentinel_nodes"),
            ("MCPCACHE_INJECTION_IMAGE_PULL_SECRETS", "injection_image_pull_secrets"),
        ):
            if listed := env.get(variable):
                values[field] = tuple(n.strip() for n in listed.split(",") if n.strip())
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise ValueError("\n".join(_problems(exc))) from None


ENVIRONMENT: Final = {
    "sidecar_image": "MCPCACHE_SIDECAR_IMAGE",
    "sidecar_image_pull_policy": "MCPCACHE_SIDECAR_IMAGE_PULL_POLICY",
    "sidecar_log_level": "MCPCACHE_SIDECAR_LOG_LEVEL",
    "sidecar_cache_max_entries": "MCPCACHE_SIDECAR_CACHE_MAX_ENTRIES",
    "sidecar_cache_max_bytes": "MCPCACHE_SIDECAR_CACHE_MAX_BYTES",
    "sidecar_shared_cache_url": "MCPCACHE_SIDECAR_SHARED_CACHE_URL",
    "sidecar_shared_cache_timeout": "MCPCACHE_SIDECAR_SHARED_CACHE_TIMEOUT",
    "sidecar_shared_cache_secret": "MCPCACHE_SIDECAR_SHARED_CACHE_SECRET",
    "sidecar_shared_cache_sentinel_master": "MCPCACHE_SIDECAR_SHARED_CACHE_SENTINEL_MASTER",
    "sidecar_run_as_user": "MCPCACHE_SIDECAR_RUN_AS_USER",
    "sidecar_tracing_enabled": "MCPCACHE_SIDECAR_TRACING_ENABLED",
    "sidecar_tracing_endpoint": "MCPCACHE_SIDECAR_TRACING_ENDPOINT",
    "sidecar_tracing_sample_ratio": "MCPCACHE_SIDECAR_TRACING_SAMPLE_RATIO",
    "metrics_port": "MCPCACHE_METRICS_PORT",
    "health_port": "MCPCACHE_HEALTH_PORT",
    "webhook_port": "MCPCACHE_WEBHOOK_PORT",
    "webhook_cert": "MCPCACHE_WEBHOOK_CERT",
    "webhook_key": "MCPCACHE_WEBHOOK_KEY",
    "lease_namespace": "MCPCACHE_LEASE_NAMESPACE",
    "lease_name": "MCPCACHE_LEASE_NAME",
    "lease_duration": "MCPCACHE_LEASE_DURATION",
    "lease_renew_deadline": "MCPCACHE_LEASE_RENEW_DEADLINE",
    "lease_retry_period": "MCPCACHE_LEASE_RETRY_PERIOD",
    "missed_scan_interval": "MCPCACHE_MISSED_SCAN_INTERVAL",
    "identity": "MCPCACHE_POD_NAME",
}
"""The variable each single-valued setting is read from (the chart sets them)."""


def _problems(exc: ValidationError) -> list[str]:
    """One line per problem, named by the variable the value came from."""
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        variable = ENVIRONMENT.get(field) or f"MCPCACHE_{field.upper()}"
        if not field:
            lines.append(problem(error))
        else:
            error["loc"] = ()
            lines.append(problem(error, None, variable))
    return lines
