"""A real Kubernetes API server for the tests: etcd + kube-apiserver from tests/controlplane.

`ControlPlane.start()` generates a CA, the API server's serving certificate, the
service-account signing key and an admin client certificate, starts the binary on free
loopback ports with RBAC authorization, waits for `/readyz`, and writes a kubeconfig.
`stop()` ends the process and removes every file it made.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from .serving import end_process_group, free_port, log_tail

BIN_ENV = "MCPCACHE_CONTROLPLANE_BIN"
"""Directory with the `controlplane`, `kubectl` and `helm` binaries (see build.sh)."""


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _pem_key(key: Any) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass
class Authority:
    """A throwaway certificate authority."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls, name: str) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        common_name: str,
        organization: str | None = None,
        hosts: tuple[str, ...] = (),
        client: bool = False,
    ) -> tuple[bytes, bytes]:
        """A leaf certificate and key (PEM) for a server's `hosts` or a client identity."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.ExtendedKeyUsage(
                    [
                        x509.ExtendedKeyUsageOID.CLIENT_AUTH
                        if client
                        else x509.ExtendedKeyUsageOID.SERVER_AUTH
                    ]
                ),
                critical=False,
            )
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


class ControlPlane:
    """etcd and kube-apiserver in one process, with an admin kubeconfig."""

    def __init__(self, bin_dir: Path, extra_args: tuple[str, ...] = ()) -> None:
        """`extra_args` go to kube-apiserver after the usual ones."""
        self.bin_dir = bin_dir
        self.extra_args = extra_args
        self.etcd_port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="mcpcache-kube-"))
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = self.dir / "kubeconfig"
        self.ca_file = self.dir / "ca.crt"
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "controlplane.log"

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def helm(self) -> Path:
        return self.bin_dir / "helm"

    def _write(self, name: str, data: bytes) -> Path:
        path = self.dir / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def start(self, timeout: float = 120.0) -> ControlPlane:
        ca = Authority.create("mcpcache-test-ca")
        self.ca_file.write_bytes(ca.pem)
        serving_cert, serving_key = ca.issue(
            "kube-apiserver",
            hosts=(
                "127.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ),
        )
        admin_cert, admin_key = ca.issue("admin", "system:masters", client=True)
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        sa_public = sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        files = {
            "serving.crt": serving_cert,
            "serving.key": serving_key,
            "admin.crt": admin_cert,
            "admin.key": admin_key,
            "sa.key": _pem_key(sa_key),
            "sa.pub": sa_public,
        }
        paths = {name: self._write(name, data) for name, data in files.items()}
        self.admin_cert, self.admin_key = paths["admin.crt"], paths["admin.key"]
        args = [
            str(self.bin_dir / "controlplane"),
            f"-data-dir={self.dir}",
            f"-etcd-client-port={self.etcd_port}",
            f"-etcd-peer-port={free_port()}",
            "--",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--tls-cert-file={paths['serving.crt']}",
            f"--tls-private-key-file={paths['serving.key']}",
            f"--client-ca-file={self.ca_file}",
            f"--service-account-key-file={paths['sa.pub']}",
            f"--service-account-signing-key-file={paths['sa.key']}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.96.0.0/16",
            # No controller-manager runs, so nothing creates namespaces' default
            # service accounts; pods are admitted without one.
            "--disable-admission-plugins=ServiceAccount",
            "--enable-priority-and-fairness=false",
            # Reach a Service through its EndpointSlice, as there is no cluster network:
            # how the tests call the chart's own webhook configuration.
            "--enable-aggregator-routing=true",
            "--profiling=false",
            f"--cert-dir={self.dir / 'certs'}",
            *self.extra_args,
        ]
        self._args = args
        self._write_kubeconfig()
        self._launch(timeout)
        return self

    def _launch(self, timeout: float) -> None:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self._args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (through etcd's own JSON
        gateway on its loopback client port), as etcd's periodic compaction does: a
        watch resumed from an older resourceVersion is then answered `410 Gone`.
        Returns the revision compacted to."""
        url = f"http://127.0.0.1:{self.etcd_port}/v3/kv"
        with httpx.Client(timeout=30) as etcd:
            found = etcd.post(f"{url}/range", json={"key": base64.b64encode(b"/").decode()})
            found.raise_for_status()
            revision = int(found.json()["header"]["revision"])
            done = etcd.post(f"{url}/compaction", json={"revision": revision, "physical": True})
            done.raise_for_status()
        return revision

    def restart(self, timeout: float = 120.0) -> None:
        """Kill the process and start it again on the same ports and etcd data, as a
        crashed and restarted API server looks to its clients."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self._launch(timeout)

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(self.admin_cert, self.admin_key)
        return context

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        context = self._ssl_context()
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"control plane exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"control plane not ready after {timeout}s:\n{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    def _write_kubeconfig(self) -> None:
        self.write_kubeconfig(
            self.kubeconfig,
            "admin",
            {"client-certificate": str(self.admin_cert), "client-key": str(self.admin_key)},
        )

    def write_kubeconfig(self, path: Path, user: str, credentials: dict[str, str]) -> Path:
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": user, "context": {"cluster": "test", "user": user}}],
            "current-context": user,
        }
        path.write_text(yaml.safe_dump(document))
        path.chmod(0o600)
        return path

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        """A kubeconfig that authenticates as the service account `namespace/name`
        with a token from the TokenRequest API: it has exactly the RBAC bound to it."""
        from kubernetes import client

        api = client.CoreV1Api(self.api_client())
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=["https://kubernetes.default.svc"], expiration_seconds=3600
            )
        )
        token = api.create_namespaced_service_account_token(name, namespace, request).status.token
        path = self.dir / f"kubeconfig-{namespace}-{name}"
        return self.write_kubeconfig(path, f"{namespace}-{name}", {"token": token})

    def api_client(self, kubeconfig: Path | None = None) -> Any:
        """A `kubernetes` ApiClient for the admin (or for another kubeconfig)."""
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(kubeconfig or self.kubeconfig), client_configuration=configuration
        )
        return client.ApiClient(configuration)

    def run_kubectl(
        self, *args: str, kubeconfig: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.kubectl), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=check,
        )

    def run_helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = os.environ | {
            "KUBECONFIG": str(self.kubeconfig),
            "HELM_CACHE_HOME": str(self.dir / "helm-cache"),
            "HELM_CONFIG_HOME": str(self.dir / "helm-config"),
            "HELM_DATA_HOME": str(self.dir / "helm-data"),
        }
        return subprocess.run(
            [str(self.helm), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=check,
            env=env,
        )

    def stop(self) -> None:
        self._terminate()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _terminate(self) -> None:
        if self.process is not None:
            end_process_group(self.process)
