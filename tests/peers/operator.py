"""The operator as a real process, authenticated as its own service account."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families

from .clients import http_get
from .controlplane import Authority, ControlPlane
from .serving import end_process_group, free_port, wait_until

SIDECAR_IMAGE = "example.test/mcpcache:under-test"
RELEASE = "mcpcache"
OPERATOR_NAMESPACE = "mcpcache-system"
LEASE_DURATION = 4.0
"""Seconds; shorter than the chart's 15 so that a takeover test takes seconds."""


class OperatorProcess:
    def __init__(
        self,
        kubeconfig: Path,
        webhook_tls: Authority | tuple[bytes, bytes],
        namespaces: tuple[str, ...] = (),
        lease: tuple[str, str] = (OPERATOR_NAMESPACE, f"{RELEASE}-operator"),
        log_level: str = "DEBUG",
        environment: dict[str, str] | None = None,
    ) -> None:
        """`webhook_tls` is a CA to issue a serving certificate for 127.0.0.1, or a
        certificate and key (PEM) to serve as they are. `lease` is the (namespace, name)
        of the Lease its replicas share (see the chart's `mcpcache.leaseName`).
        `environment` adds or overrides settings (as the chart's values would)."""
        self.kubeconfig = kubeconfig
        self.environment = environment or {}
        self.namespaces = namespaces
        self.lease = lease
        self.log_level = log_level
        self.dir = Path(tempfile.mkdtemp(prefix="mcpcache-operator-"))
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.webhook_port = free_port()
        if isinstance(webhook_tls, Authority):
            cert, key = webhook_tls.issue("mcpcache-webhook", hosts=("127.0.0.1",))
        else:
            cert, key = webhook_tls
        self.cert_file = self.dir / "tls.crt"
        self.key_file = self.dir / "tls.key"
        self.cert_file.write_bytes(cert)
        self.key_file.write_bytes(key)
        self.log_path = self.dir / "operator.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        env = (
            os.environ
            | {
                "KUBECONFIG": str(self.kubeconfig),
                "MCPCACHE_METRICS_PORT": str(self.metrics_port),
                "MCPCACHE_HEALTH_PORT": str(self.health_port),
                "MCPCACHE_WEBHOOK_PORT": str(self.webhook_port),
                "MCPCACHE_WEBHOOK_CERT": str(self.cert_file),
                "MCPCACHE_WEBHOOK_KEY": str(self.key_file),
                "MCPCACHE_SIDECAR_IMAGE": SIDECAR_IMAGE,
                "MCPCACHE_NAMESPACES": ",".join(self.namespaces),
                "MCPCACHE_LEASE_NAMESPACE": self.lease[0],
                "MCPCACHE_LEASE_NAME": self.lease[1],
                "MCPCACHE_LEASE_DURATION": str(LEASE_DURATION),
                "MCPCACHE_LEASE_RENEW_DEADLINE": str(LEASE_DURATION * 0.75),
                "MCPCACHE_LEASE_RETRY_PERIOD": "0.5",
                "MCPCACHE_MISSED_SCAN_INTERVAL": "1",
            }
            | self.environment
        )
        log = self.log_path.open("ab")
        cli = [sys.executable, "-m", "mcpcache.sidecar.cli", "operator"]
        self.process = subprocess.Popen(
            [*cli, "--log-level", self.log_level],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        try:
            wait_until(self._healthy, 60, "the operator's health endpoint")
        except BaseException:
            self.stop()
            raise
        return self

    def _healthy(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"operator exited:\n{self.log_tail()}")
        try:
            url = f"http://127.0.0.1:{self.health_port}/healthz"
            return http_get(url, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def metrics(self) -> str:
        return http_get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text

    def sample(self, name: str, **labels: str) -> float | None:
        """One sample of the operator's /metrics, or None when it is not there."""
        for family in text_string_to_metric_families(self.metrics()):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return None

    def ready(self) -> bool:
        """Whether its readiness probe (the chart's) passes: the webhook answers."""
        try:
            url = f"http://127.0.0.1:{self.health_port}/readyz"
            return http_get(url, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def leading(self) -> bool:
        """Whether it holds the Lease (its `mcpcache_operator_leader` gauge)."""
        return self.sample("mcpcache_operator_leader") == 1

    def kill(self) -> None:
        """SIGKILL: no handover, as when its node dies."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def terminate(self) -> None:
        """SIGTERM, as in a rollout; it can be started again."""
        if self.process is not None:
            end_process_group(self.process, grace=20)

    def stop(self) -> None:
        self.terminate()
        shutil.rmtree(self.dir, ignore_errors=True)


def service_account(release: str) -> str:
    """The operator's service account in a release of the chart (see _helpers.tpl)."""
    fullname = release if "mcpcache" in release else f"{release}-mcpcache"
    return f"{fullname}-operator"


def render_chart(
    plane: ControlPlane,
    chart: Path,
    namespace: str,
    *templates: str,
    values: tuple[str, ...] = (),
    release: str = RELEASE,
) -> list[dict[str, Any]]:
    """The chart's documents from `templates` (all when none), rendered by helm."""
    args = ["template", release, str(chart), "--namespace", namespace]
    for template in templates:
        args += ["--show-only", f"templates/{template}"]
    for value in values:
        args += ["--set", value]
    rendered = plane.run_helm(*args).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def apply(plane: ControlPlane, documents: list[dict[str, Any]], name: str) -> None:
    manifest = plane.dir / f"{name}.yaml"
    manifest.write_text(yaml.safe_dump_all(documents))
    plane.run_kubectl("apply", "-f", str(manifest))


def install_operator_rbac(
    plane: ControlPlane,
    chart: Path,
    namespace: str,
    values: tuple[str, ...] = (),
    release: str = RELEASE,
    may_create_in: str | None = None,
) -> Path:
    """Apply the chart's ServiceAccount, RBAC and admission policy only; return that
    account's kubeconfig. The policy is in force when this returns (checked in
    `may_create_in`, a namespace where RBAC lets the account create; default: its own)."""
    documents = render_chart(
        plane,
        chart,
        namespace,
        "serviceaccount.yaml",
        "rbac.yaml",
        "admissionpolicy.yaml",
        values=values,
        release=release,
    )
    apply(plane, documents, f"operator-rbac-{release}")
    kubeconfig = plane.service_account_kubeconfig(namespace, service_account(release))
    probe = may_create_in or namespace
    wait_until(lambda: _policy_refuses(plane, kubeconfig, probe), 30, "the admission policy")
    return kubeconfig


def _policy_refuses(plane: ControlPlane, kubeconfig: Path, namespace: str) -> bool:
    """Whether the admission policy already refuses the operator another ConfigMap
    (asked with a server-side dry run, which creates nothing)."""
    result = plane.run_kubectl(
        "create",
        "configmap",
        "not-the-operators",
        "-n",
        namespace,
        "--dry-run=server",
        kubeconfig=kubeconfig,
        check=False,
    )
    return result.returncode != 0 and "may create only" in result.stderr


def node_address() -> str:
    """A local IPv4 address other than loopback (an EndpointSlice may not hold loopback)."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return str(address.address)
    raise RuntimeError("the chart's webhook test needs a non-loopback IPv4 address")


class ChartWebhook:
    """The chart's webhook as installed: its Secret (the generated CA and serving
    certificate), Service and MutatingWebhookConfiguration, applied unchanged but for a
    Fail policy. The API server reaches the Service through an EndpointSlice that points
    at the operator process on this machine's address."""

    def __init__(self, plane: ControlPlane, chart: Path, namespace: str) -> None:
        self.plane = plane
        self.namespace = namespace
        values = ("webhook.failurePolicy=Fail", "webhook.timeoutSeconds=10")
        self.documents = render_chart(
            plane, chart, namespace, "webhook.yaml", "service.yaml", values=values
        )
        (tls,) = [d for d in self.documents if d["metadata"]["name"].endswith("-webhook-tls")]
        self.certificate = (
            base64.b64decode(tls["data"]["tls.crt"]),
            base64.b64decode(tls["data"]["tls.key"]),
        )
        (self.service,) = [d for d in self.documents if d["kind"] == "Service"]
        (configuration,) = [
            d for d in self.documents if d["kind"] == "MutatingWebhookConfiguration"
        ]
        self.name = str(configuration["metadata"]["name"])

    def install(self, port: int) -> None:
        """Apply it all, with the Service's endpoint at `port` on this machine."""
        service = self.service["metadata"]["name"]
        endpoints = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{service}-local",
                "namespace": self.namespace,
                "labels": {"kubernetes.io/service-name": service},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [node_address()], "conditions": {"ready": True}}],
            "ports": [{"name": "webhook", "port": port, "protocol": "TCP"}],
        }
        apply(self.plane, [*self.documents, endpoints], "webhook")
        wait_until(self.answers, 30, "the API server to call the chart's webhook")

    def answers(self) -> bool:
        """Whether the API server already calls the webhook: a labelled pod, created as a
        dry run (nothing is stored), comes back with the sidecar."""
        core = client.CoreV1Api(self.plane.api_client())
        pod = {
            "metadata": {"name": "probe", "labels": {"mcpcache.io/inject": "true"}},
            "spec": {"containers": [{"name": "agent", "image": "agent:1"}]},
        }
        try:
            created = core.create_namespaced_pod("default", pod, dry_run="All", _request_timeout=30)
        except ApiException:
            return False
        return bool(created.spec.init_containers)
