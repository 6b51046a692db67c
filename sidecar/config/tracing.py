"""Tracing's settings: off unless the config or the standard OpenTelemetry variables turn
it on, and where spans go.

The sidecar is one more hop in traces the agent, the gateways and the MCP servers already
emit; it follows the variables they follow (`OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER`, `OTEL_SERVICE_NAME`, `OTEL_BSP_*`), so that
a pod set up for tracing traces its sidecar too. The config field is for the operator's
ConfigMap and a standalone file, where no variable is at hand."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

from pydantic import Field

from .fields import Model

ENDPOINT_ENV: Final = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
"""Either turns tracing on (the exporter reads them itself)."""
SAMPLE_RATIO_ENV: Final = "MCPCACHE_TRACING_SAMPLE_RATIO"
DEFAULT_ENDPOINT: Final = "http://localhost:4318"
"""The OTLP/HTTP exporter's own default: a collector in the pod."""
SERVICE_NAME: Final = "mcpcache-sidecar"
"""The service name unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` give one."""


def endpoint_problem(url: str) -> str | None:
    """What is wrong with a collector's OTLP/HTTP base URL, or None. Checked where an
    endpoint is given to many sidecars at once (the operator's settings, a pod's
    annotation): a typo there would otherwise be found only as spans that never arrive.
    Credentials are refused: an annotation or a chart value is read by everyone who
    reads the pod (the exporter takes them from `OTEL_EXPORTER_OTLP_HEADERS`)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "use an http:// or https:// URL, e.g. http://otel-collector.observability:4318"
    if parts.scheme not in ("http", "https") or not parts.hostname or not url.isprintable():
        return "use an http:// or https:// URL, e.g. http://otel-collector.observability:4318"
    if " " in url or parts.query or parts.fragment:
        return "use the collector's base URL, without spaces, a query or a fragment"
    if parts.username is not None or parts.password is not None:
        return "credentials do not belong in the URL; set OTEL_EXPORTER_OTLP_HEADERS instead"
    if port == 0:
        return "use a port from 1 to 65535"
    return None


class Tracing(Model):
    """`tracing:` in the config file."""

    enabled: bool = False
    endpoint: str | None = None
    """The OTLP/HTTP collector's base URL (`http://otel-collector:4318`); unset: the
    `OTEL_EXPORTER_OTLP_*` variables, else the exporter's default (localhost:4318)."""
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)
    """The share of traces started here that are kept; a caller's sampling decision
    (the `traceparent` flag) is always followed."""

    def active(self, environ: Mapping[str, str]) -> bool:
        """Whether spans are made at all: the field, or an OTLP endpoint in the
        environment, unless the environment switches the SDK or its trace exporter off."""
        if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return False
        if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
            return False
        return self.enabled or any(environ.get(name) for name in ENDPOINT_ENV)

    def ratio(self, environ: Mapping[str, str]) -> float:
        """The sample ratio, `MCPCACHE_TRACING_SAMPLE_RATIO` (what the webhook injects)
        over the field; a value that is not a ratio leaves the field's."""
        value = environ.get(SAMPLE_RATIO_ENV)
        try:
            ratio = float(value) if value else self.sample_ratio
        except ValueError:
            return self.sample_ratio
        return ratio if 0.0 <= ratio <= 1.0 else self.sample_ratio
