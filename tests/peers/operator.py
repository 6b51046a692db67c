"""The operator as a real process, authenticated as its own service account."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from .controlplane import Authority, ControlPlane
from .serving import end_process_group, free_port, wait_until

SIDECAR_IMAGE = "example.test/mcpcache:under-test"


class OperatorProcess:
    def __init__(self, kubeconfig: Path, webhook_ca: Authority) -> None:
        self.kubeconfig = kubeconfig
        self.dir = Path(tempfile.mkdtemp(prefix="mcpcache-operator-"))
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.webhook_port = free_port()
        cert, key = webhook_ca.issue("mcpcache-webhook", hosts=("127.0.0.1",))
        self.cert_file = self.dir / "tls.crt"
        self.key_file = self.dir / "tls.key"
        self.cert_file.write_bytes(cert)
        self.key_file.write_bytes(key)
        self.log_path = self.dir / "operator.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        env = os.environ | {
            "KUBECONFIG": str(self.kubeconfig),
            "MCPCACHE_METRICS_PORT": str(self.metrics_port),
            "MCPCACHE_HEALTH_PORT": str(self.health_port),
            "MCPCACHE_WEBHOOK_PORT": str(self.webhook_port),
            "MCPCACHE_WEBHOOK_CERT": str(self.cert_file),
            "MCPCACHE_WEBHOOK_KEY": str(self.key_file),
            "MCPCACHE_SIDECAR_IMAGE": SIDECAR_IMAGE,
        }
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mcpcache.sidecar.cli", "operator", "--log-level", "DEBUG"],
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
            return httpx.get(f"http://127.0.0.1:{self.health_port}/healthz").status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics").text

    def stop(self) -> None:
        if self.process is not None:
            end_process_group(self.process, grace=20)
        shutil.rmtree(self.dir, ignore_errors=True)


def install_operator_rbac(plane: ControlPlane, chart: Path, namespace: str) -> Path:
    """Apply the chart's ServiceAccount and RBAC only; return that account's kubeconfig."""
    rendered = plane.run_helm(
        "template",
        "mcpcache",
        str(chart),
        "--namespace",
        namespace,
        "--show-only",
        "templates/serviceaccount.yaml",
        "--show-only",
        "templates/rbac.yaml",
    ).stdout
    manifest = plane.dir / "operator-rbac.yaml"
    manifest.write_text(rendered)
    plane.run_kubectl("apply", "-f", str(manifest))
    return plane.service_account_kubeconfig(namespace, "mcpcache-operator")
