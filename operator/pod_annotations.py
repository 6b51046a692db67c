"""What a pod may choose about its own sidecar, through annotations. Pure.

As Istio's `sidecar.istio.io/proxyCPU` and Dapr's `dapr.io/sidecar-memory-limit` do, a
pod's author sets the sidecar's ports, resources, cache budget, log level and tracing on
the pod itself; everything unset comes from the operator's settings (the chart's values). Each
value is checked here, at admission, so that a mistake is refused with a message naming
the annotation, the value and what is allowed, rather than found in a crash-looping
container.

Ports: the defaults (3500 for MCP, 9090 for metrics) are also daprd's defaults, so a pod
that runs daprd, or declares either port itself, gets the next free pair of
`PROXY_PORTS` / `METRICS_PORTS` instead; the app finds the proxy through `MCPCACHE_URL`
whatever the port. A port set by annotation is never moved: a clash is refused.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mcpcache.sidecar.config import parse_quantity
from mcpcache.sidecar.config.tracing import DEFAULT_ENDPOINT, endpoint_problem

from .settings import SIDECAR_LISTEN_PORT, SIDECAR_METRICS_PORT, OperatorSettings

PROXY_PORT_ANNOTATION: Final = "mcpcache.io/proxy-port"
METRICS_PORT_ANNOTATION: Final = "mcpcache.io/metrics-port"
CPU_REQUEST_ANNOTATION: Final = "mcpcache.io/cpu-request"
MEMORY_REQUEST_ANNOTATION: Final = "mcpcache.io/memory-request"
MEMORY_LIMIT_ANNOTATION: Final = "mcpcache.io/memory-limit"
CACHE_ENTRIES_ANNOTATION: Final = "mcpcache.io/cache-entries"
CACHE_BYTES_ANNOTATION: Final = "mcpcache.io/cache-bytes"
LOG_LEVEL_ANNOTATION: Final = "mcpcache.io/log-level"
TRACING_ANNOTATION: Final = "mcpcache.io/tracing"
TRACING_ENDPOINT_ANNOTATION: Final = "mcpcache.io/tracing-endpoint"
TRACING_SAMPLE_RATIO_ANNOTATION: Final = "mcpcache.io/tracing-sample-ratio"

PROXY_PORTS: Final = (SIDECAR_LISTEN_PORT, 3510, 3520, 3530)
"""The proxy's port: the first of these that nothing else in the pod uses."""
METRICS_PORTS: Final = (SIDECAR_METRICS_PORT, 9190, 9290, 9390)
"""The metrics and probes port, chosen the same way."""
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")
LOWEST_PORT: Final = 1024
"""The sidecar runs without capabilities, so it cannot bind a port below this."""

DAPR_ENABLED_ANNOTATION: Final = "dapr.io/enabled"
DAPR_METRICS_PORT_ANNOTATION: Final = "dapr.io/metrics-port"
DAPR_APP_PORT_ANNOTATION: Final = "dapr.io/app-port"
DAPRD_PORTS: Final = (3500, 3501, 9090, 50001, 50002, 7777)
"""The ports daprd listens on by default (HTTP, public health, metrics, gRPC, internal
gRPC, profiling): taken in a pod that Dapr's injector gives daprd, whether it has added
the container before this webhook runs or adds it after."""

_CPU = re.compile(r"^([0-9]+m|[0-9]+([.][0-9]+)?)$")
_COUNT = re.compile(r"^[1-9][0-9]{0,8}$")
_RATIO = re.compile(r"^(0|1|0?[.][0-9]{1,6}|1[.]0{1,6})$")


class InjectionRefused(ValueError):
    """The pod asks for the sidecar but its spec cannot take it; the message says why."""


@dataclass(frozen=True)
class PodChoices:
    """The sidecar settings for one pod: its annotations over the operator's settings."""

    proxy_port: int
    metrics_port: int
    resources: dict[str, Any]
    cache_entries: int | None
    cache_bytes: str | None
    log_level: str
    tracing: TracingChoice | None
    """None: the sidecar sends no spans."""


@dataclass(frozen=True)
class TracingChoice:
    """Where this pod's sidecar sends its spans, and the share of new traces it keeps."""

    endpoint: str
    sample_ratio: float


def _refuse(annotation: str, value: str, allowed: str) -> InjectionRefused:
    return InjectionRefused(f"annotation {annotation}: {value!r} is not allowed: {allowed}")


def _port(annotations: Mapping[str, str], annotation: str) -> int | None:
    value = annotations.get(annotation)
    if value is None:
        return None
    if not value.isascii() or not value.isdigit() or not LOWEST_PORT <= int(value) <= 65535:
        raise _refuse(annotation, value, f"use a port number from {LOWEST_PORT} to 65535")
    return int(value)


def taken_ports(pod: Mapping[str, Any]) -> dict[int, str]:
    """Ports something else in the pod listens on, and what: each container's declared
    ports, and daprd's when the pod asks Dapr for it."""
    spec = pod.get("spec") or {}
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    used: dict[int, str] = {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    dapr = annotations.get(DAPR_ENABLED_ANNOTATION) == "true" or any(
        c.get("name") == "daprd" for c in containers
    )
    if dapr:
        for port in DAPRD_PORTS:
            used[port] = "daprd"
        for annotation in (DAPR_METRICS_PORT_ANNOTATION, DAPR_APP_PORT_ANNOTATION):
            if str(annotations.get(annotation, "")).isdigit():
                used[int(annotations[annotation])] = f"daprd ({annotation})"
    for container in containers:
        for port in container.get("ports") or []:
            used[int(port.get("containerPort", 0))] = f"container {container.get('name', '?')!r}"
    return used


def _choose_port(
    annotations: Mapping[str, str],
    annotation: str,
    candidates: tuple[int, ...],
    taken: Mapping[int, str],
) -> int:
    chosen = _port(annotations, annotation)
    if chosen is not None:
        if chosen in taken:
            raise _refuse(
                annotation, str(chosen), f"{taken[chosen]} uses that port; choose another"
            )
        return chosen
    free = next((port for port in candidates if port not in taken), None)
    if free is None:
        ports = ", ".join(str(p) for p in candidates)
        raise InjectionRefused(
            f"every default port of the sidecar ({ports}) is in use in the pod; "
            f"set {annotation} to a free port"
        )
    return free


def _memory(annotations: Mapping[str, str], annotation: str) -> str | None:
    value = annotations.get(annotation)
    if value is None:
        return None
    try:
        if parse_quantity(value) < 1 << 20:
            raise ValueError
    except ValueError:
        raise _refuse(annotation, value, "use a size of at least 1Mi, e.g. 128Mi or 1Gi") from None
    return value


def _resources(annotations: Mapping[str, str], settings: OperatorSettings) -> dict[str, Any]:
    resources: dict[str, Any] = copy.deepcopy(settings.sidecar_resources)
    if (cpu := annotations.get(CPU_REQUEST_ANNOTATION)) is not None:
        if not _CPU.match(cpu) or cpu.strip("0.m") == "":
            raise _refuse(CPU_REQUEST_ANNOTATION, cpu, "use CPU units, e.g. 50m, 250m or 0.5")
        resources.setdefault("requests", {})["cpu"] = cpu
    if (memory := _memory(annotations, MEMORY_REQUEST_ANNOTATION)) is not None:
        resources.setdefault("requests", {})["memory"] = memory
    if (limit := _memory(annotations, MEMORY_LIMIT_ANNOTATION)) is not None:
        resources.setdefault("limits", {})["memory"] = limit
    request = (resources.get("requests") or {}).get("memory")
    limit = (resources.get("limits") or {}).get("memory")
    if request and limit and _bytes(request) > _bytes(limit):
        raise InjectionRefused(
            f"annotation {MEMORY_REQUEST_ANNOTATION}: {request!r} is not allowed: the request "
            f"must not exceed the memory limit ({limit})"
        )
    return resources


def _bytes(quantity: str) -> int:
    try:
        return int(parse_quantity(quantity))
    except ValueError:  # a form of the operator's own settings we do not parse: no check
        return 0


def _cache_entries(annotations: Mapping[str, str], settings: OperatorSettings) -> int | None:
    value = annotations.get(CACHE_ENTRIES_ANNOTATION)
    if value is None:
        entries: int | None = settings.sidecar_cache_max_entries
        return entries
    if not _COUNT.match(value):
        raise _refuse(CACHE_ENTRIES_ANNOTATION, value, "use a whole number of entries, at least 1")
    return int(value)


def _cache_bytes(
    annotations: Mapping[str, str], settings: OperatorSettings, resources: Mapping[str, Any]
) -> str | None:
    value = annotations.get(CACHE_BYTES_ANNOTATION)
    if value is None:
        size_text: str | None = settings.sidecar_cache_max_bytes
        return size_text
    try:
        size = parse_quantity(value)
        if size < 1:
            raise ValueError
    except ValueError:
        raise _refuse(CACHE_BYTES_ANNOTATION, value, "use a size such as 16Mi or 256Mi") from None
    limit = (resources.get("limits") or {}).get("memory")
    if limit and _bytes(limit) and size >= _bytes(limit):
        raise _refuse(
            CACHE_BYTES_ANNOTATION,
            value,
            f"the cache must fit under the sidecar's memory limit ({limit}) with room to "
            f"spare; raise {MEMORY_LIMIT_ANNOTATION} too",
        )
    return value


def _log_level(annotations: Mapping[str, str], settings: OperatorSettings) -> str:
    value = annotations.get(LOG_LEVEL_ANNOTATION)
    if value is None:
        return str(settings.sidecar_log_level)
    if value.upper() not in LOG_LEVELS:
        raise _refuse(LOG_LEVEL_ANNOTATION, value, f"use one of {', '.join(LOG_LEVELS)}")
    return value.upper()


def _tracing(annotations: Mapping[str, str], settings: OperatorSettings) -> TracingChoice | None:
    """On as the operator's settings say unless the pod says otherwise: `tracing` turns
    it on or off, an endpoint turns it on. A ratio or an endpoint on a pod whose tracing
    stays off is refused rather than ignored: its author expects spans."""
    switch = annotations.get(TRACING_ANNOTATION)
    if switch is not None and switch not in ("true", "false"):
        raise _refuse(TRACING_ANNOTATION, switch, "use true or false")
    endpoint = annotations.get(TRACING_ENDPOINT_ANNOTATION)
    if endpoint is not None and (problem := endpoint_problem(endpoint)):
        raise _refuse(TRACING_ENDPOINT_ANNOTATION, endpoint, problem)
    ratio = annotations.get(TRACING_SAMPLE_RATIO_ANNOTATION)
    if ratio is not None and not _RATIO.match(ratio):
        raise _refuse(TRACING_SAMPLE_RATIO_ANNOTATION, ratio, "use a ratio from 0 to 1, e.g. 0.1")
    if switch is None:
        on = endpoint is not None or settings.sidecar_tracing_enabled
    else:
        on = switch == "true"
    if not on:
        if switch == "false":
            why = f'{TRACING_ANNOTATION} is "false"'
        else:
            why = f'tracing is off; set {TRACING_ANNOTATION}: "true" or an endpoint too'
        for annotation, value in (
            (TRACING_ENDPOINT_ANNOTATION, endpoint),
            (TRACING_SAMPLE_RATIO_ANNOTATION, ratio),
        ):
            if value is not None:
                raise _refuse(annotation, value, why)
        return None
    return TracingChoice(
        endpoint=endpoint or settings.sidecar_tracing_endpoint or DEFAULT_ENDPOINT,
        sample_ratio=float(ratio) if ratio is not None else settings.sidecar_tracing_sample_ratio,
    )


def pod_choices(pod: Mapping[str, Any], settings: OperatorSettings) -> PodChoices:
    """The sidecar's settings for this pod, or InjectionRefused naming the bad value."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    taken = taken_ports(pod)
    proxy_port = _choose_port(annotations, PROXY_PORT_ANNOTATION, PROXY_PORTS, taken)
    taken = {**taken, proxy_port: f"the sidecar's proxy ({PROXY_PORT_ANNOTATION})"}
    metrics_port = _choose_port(annotations, METRICS_PORT_ANNOTATION, METRICS_PORTS, taken)
    resources = _resources(annotations, settings)
    return PodChoices(
        proxy_port=proxy_port,
        metrics_port=metrics_port,
        resources=resources,
        cache_entries=_cache_entries(annotations, settings),
        cache_bytes=_cache_bytes(annotations, settings, resources),
        log_level=_log_level(annotations, settings),
        tracing=_tracing(annotations, settings),
    )
