"""`mcpcache operator`: run the operator (reconciliation, and the injection webhook)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Sequence
from typing import Any, cast

import kopf
from prometheus_client import start_http_server

from mcpcache.sidecar.logs import configure_logging

from .health import HealthServer
from .kube import mcpservers
from .kube.api import KubeAPI, load_configuration
from .kube.configmaps import watches
from .kube.events import EventPoster
from .kube.lease import LeaseElector, LeaseSettings
from .kube.pods import MissedInjections
from .metrics import OperatorMetrics
from .reconcile import Reconciler
from .scheduling import NamespaceQueue
from .settings import OperatorSettings
from .state import ClusterState
from .webhook import INJECT_HANDLER_ID, build_registry

logger = logging.getLogger("mcpcache.operator")


class _ExpectedRefusals(logging.Filter):
    """kopf logs a refused admission as an error ("failed permanently"); a pod that
    cannot take the sidecar is an expected outcome, which the handler logs itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return f"'{INJECT_HANDLER_ID}' failed permanently" not in record.getMessage()


def quiet_logs() -> None:
    # Every health probe and admission would write an access-log line at INFO.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # kopf logs "Handler ... succeeded." for every event it hands to a handler; the
    # queue logs one line per pass over a namespace instead. Warnings stay.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    logging.getLogger("kopf.objects").addFilter(_ExpectedRefusals())


def configure_kopf(settings: OperatorSettings, kopf_settings: kopf.OperatorSettings) -> None:
    # kopf watches the MCPServers (see `kube.mcpservers`) and serves the webhook; the
    # operator posts its own events. Watching given namespaces, the operator holds Roles
    # there and no cluster-wide right, so kopf must not scan the cluster's CRDs either.
    mcpservers.configure_watching(kopf_settings)
    kopf_settings.posting.enabled = False
    kopf_settings.scanning.disabled = bool(settings.namespaces)
    kopf_settings.networking.error_backoffs = [1, 2, 5, 10]
    if settings.webhook_cert and settings.webhook_key:
        kopf_settings.admission.server = kopf.WebhookServer(
            addr="0.0.0.0",
            port=settings.webhook_port,
            certfile=settings.webhook_cert,
            pkeyfile=settings.webhook_key,
        )
    # The MutatingWebhookConfiguration belongs to the Helm chart, not to the operator:
    # the operator needs no permission to change admission configuration.
    kopf_settings.admission.managed = None


def _identity(settings: OperatorSettings) -> str:
    if settings.identity:
        return str(settings.identity)
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


async def _when_listed(
    listed: list[asyncio.Event], state: ClusterState, queue: NamespaceQueue
) -> None:
    await asyncio.gather(*(event.wait() for event in listed))
    logger.info(
        "listed",
        extra={"namespaces": len(list(state.namespaces())), "mcpservers": state.server_count()},
    )
    queue.all_listed()


async def run(settings: OperatorSettings, stop: asyncio.Event | None = None) -> None:
    metrics = OperatorMetrics()
    start_http_server(settings.metrics_port, registry=metrics.registry)
    configuration = load_configuration()
    api = KubeAPI(configuration, metrics)
    # The Lease has a client of its own: a renewal never waits behind the passes' writes.
    lease_api = KubeAPI(configuration, metrics, connections=2)
    events = EventPoster(api)
    queue = NamespaceQueue(metrics)
    reconciler = Reconciler(api, metrics, events.warn, events.info, queue.request)
    state = ClusterState(reconciler.server_changed, reconciler.configmap_changed)
    reconciler.view = state
    queue.run_pass, queue.namespaces = reconciler.reconcile, state.namespaces
    listing = mcpservers.ServerListing(api, state, settings.namespaces)
    registry = build_registry(settings, metrics)
    mcpservers.register(registry, state, listing)
    kopf_settings = kopf.OperatorSettings()
    configure_kopf(settings, kopf_settings)
    lease = LeaseSettings(
        namespace=settings.lease_namespace,
        name=settings.lease_name,
        identity=_identity(settings),
        duration=settings.lease_duration,
        renew_deadline=settings.lease_renew_deadline,
        retry_period=settings.lease_retry_period,
    )
    elector = LeaseElector(lease_api, lease, metrics, queue.start_leading, queue.stop_leading)
    reconciler.fence = elector.remaining
    health = HealthServer(
        settings.health_port, settings.webhook_port if settings.webhook_cert else None
    )
    await health.start()
    # Created before kopf starts, so kopf's shutdown leaves it to us: the Lease is
    # released after the last pass, which a standby then takes at once.
    electing = asyncio.create_task(elector.run())
    logger.info("lease candidate", extra={"identity": lease.identity, "lease": lease.name})
    watching = watches(api, state, settings.namespaces)
    background = [asyncio.create_task(w.run()) for w in watching]
    background.append(asyncio.create_task(listing.run()))
    listed = [w.listed for w in watching] + [listing.listed]
    background.append(asyncio.create_task(_when_listed(listed, state, queue)))
    missed = MissedInjections(api, metrics, settings.namespaces, settings.missed_scan_interval)
    background.append(asyncio.create_task(missed.run()))
    try:
        await kopf.operator(
            registry=registry,
            settings=kopf_settings,
            standalone=True,
            # kopf's own default asks the password database for our user name, which a
            # container running as a bare uid (65532 in the image) does not have. kopf
            # types this as a NewType of str that it does not export: a str is what it is.
            identity=cast(Any, lease.identity),
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            stop_flag=stop,
        )
    finally:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        queue.stop_leading()
        await queue.close()
        electing.cancel()
        await asyncio.gather(electing, return_exceptions=True)
        await health.stop()
        await asyncio.wait_for(events.drain(), 5)
        await api.close()
        await lease_api.close()


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="mcpcache operator", description=__doc__)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(list(argv))
    configure_logging(args.log_level)
    quiet_logs()
    try:
        settings = OperatorSettings.from_environment()
    except ValueError as exc:
        logger.error("cannot start: invalid settings", extra={"problems": str(exc).splitlines()})
        return 2
    logger.info(
        "operator starting",
        extra={
            "namespaces": list(settings.namespaces) or "all",
            "webhook": bool(settings.webhook_cert),
        },
    )
    asyncio.run(run(settings))
    return 0


__all__ = ["main", "run"]
