"""A one-node Kubernetes cluster in a network namespace of its own.

Everything is built here from pinned sources (tests/controlplane, tests/node) or comes
from Debian (containerd, runc, the CNI plugins), and runs as processes of this test run:
etcd and kube-apiserver (the control plane binary), kube-controller-manager,
kube-scheduler, kube-proxy (iptables), containerd (CRI, cgroupfs, overlayfs) and the
kubelet. They all live in a network namespace the run creates, with the node's address
on an interface there and the pods on a CNI bridge there, so no address of the
cluster exists in the machine's own namespace. The tests reach the API server through
`forward.py`, a loopback port that leads into the namespace.

`stop()` takes everything down again, whatever state the start reached: pods, processes
(by the ids this run started, and the containers' processes found in the cgroups this
run made), mounts under the node's directory, cgroups, the network namespace, and the
kernel settings the kubelet changes. `leftovers()` lists what would have been left.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from . import forward
from .controlplane import Authority, ControlPlane
from .serving import end_process_group, log_tail

NODE_BIN_ENV = "MCPCACHE_NODE_BIN"
"""Directory with kubelet, kube-controller-manager, kube-scheduler, kube-proxy, pause."""
IMAGES_ENV = "MCPCACHE_IMAGES"
"""Directory with the image archives tests/node/image.sh makes, and their `names`."""

NODE_NAME = "node"
NODE_IP = "10.250.0.2"
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/16"
API_SERVICE_IP = "10.96.0.1"
API_PORT = 6443

KERNEL_SETTINGS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
"""What the kubelet sets on start (its kernel tunables), put back by `stop()`."""

KERNEL_STATE = Path("/run/mcpcache-node-kernel.json")
"""The kernel settings as they were before the first node of this boot that is still
running, and which runs' nodes are up: the last one to stop puts them back, so nodes of
two test runs at once (or a run after one that was killed) restore the right values."""

CGROUPS = Path("/sys/fs/cgroup")


def images(directory: Path) -> dict[str, str]:
    """The image names in an image.sh directory, by archive: mcpcache, peers, pause."""
    names = {}
    for line in (directory / "names").read_text().splitlines():
        archive, name = line.split()
        names[archive.removesuffix(".tar")] = name
    return names


@contextlib.contextmanager
def _kernel_state() -> Iterator[dict[str, Any]]:
    """The shared record of KERNEL_STATE, locked while in use, written back after."""
    with KERNEL_STATE.with_suffix(".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state: dict[str, Any] = {"saved": {}, "owners": {}}
        if KERNEL_STATE.exists():
            state = json.loads(KERNEL_STATE.read_text())
        state["owners"] = {
            owner: pid for owner, pid in state["owners"].items() if Path(f"/proc/{pid}").exists()
        }
        yield state
        if state["owners"]:
            KERNEL_STATE.write_text(json.dumps(state))
        else:
            KERNEL_STATE.unlink(missing_ok=True)


def _claim_kernel_settings(owner: str) -> dict[str, str]:
    """Note this node as a user of the kernel settings the kubelet changes; the values to
    restore are read now unless a record of an earlier node holds them already."""
    with _kernel_state() as state:
        if not state["saved"]:
            state["saved"] = {s: Path("/proc/sys", s).read_text().strip() for s in KERNEL_SETTINGS}
        state["owners"][owner] = os.getpid()
        return dict(state["saved"])


def _release_kernel_settings(owner: str) -> None:
    """Put the settings back once no other node of this machine is running."""
    with _kernel_state() as state:
        state["owners"].pop(owner, None)
        if not state["owners"]:
            for setting, value in state["saved"].items():
                path = Path("/proc/sys", setting)
                if path.read_text().strip() != value:
                    path.write_text(value)


def _mounts_under(prefix: str) -> list[str]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix.rstrip("/") + "/"):
            found.append(point)
    return found


def _pids_with(argument: str) -> list[int]:
    """Processes whose command line holds `argument` (a path unique to this node)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(argument.encode() in word for word in words):
            pids.append(int(entry.name))
    return pids


class Node(ControlPlane):
    """The cluster: the API server reached at `url` (loopback, forwarded), plus a node."""

    def __init__(self, controlplane_bin: Path, node_bin: Path, images_dir: Path) -> None:
        super().__init__(controlplane_bin)
        self.node_bin = node_bin
        self.images_dir = images_dir
        self.images = images(images_dir)
        self.id = secrets.token_hex(4)
        self.netns = f"mcpcache-{self.id}"
        self.cgroup = f"mcpcache-{self.id}"
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.saved_settings: dict[str, str] = {}
        self.timings: dict[str, float] = {}

    # Start.

    def start(self, timeout: float = 180.0) -> Node:
        started = time.monotonic()
        try:
            self._network()
            self._certificates()
            self._forward()
            self._write_kubeconfig()
            self._launch(timeout)
            self.timings["api server"] = time.monotonic() - started
            self._containerd()
            self.timings["containerd and images"] = time.monotonic() - started
            self._components()
            self._wait_node(timeout)
            self.timings["node ready"] = time.monotonic() - started
        except BaseException:
            self.stop()
            raise
        return self

    def _run(self, *args: str, netns: bool = False, timeout: float = 60) -> str:
        command = [*self._in_netns(), *args] if netns else list(args)
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: {result.stderr or result.stdout}")
        return result.stdout

    def _in_netns(self) -> list[str]:
        # nsenter changes the network namespace only: the mounts the kubelet makes stay
        # visible to containerd and runc (`ip netns exec` would give a mount namespace).
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--"]

    def _network(self) -> None:
        self._run("ip", "netns", "add", self.netns)
        for command in (
            "ip link set lo up",
            # A veth pair with both ends here: this kernel has no dummy interfaces.
            "ip link add node0 type veth peer name node1",
            f"ip addr add {NODE_IP}/24 dev node0",
            "ip link set node1 up",
            "ip link set node0 up",
            "ip route add default dev node0",
        ):
            self._run(*command.split(), netns=True)

    def _certificates(self) -> None:
        ca = Authority.create("mcpcache-node-ca")
        self.ca_file.write_bytes(ca.pem)
        hosts = (
            "127.0.0.1",
            NODE_IP,
            API_SERVICE_IP,
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
        pairs = {
            "serving": ca.issue("kube-apiserver", hosts=hosts),
            "admin": ca.issue("admin", "system:masters", client=True),
            "apiserver-kubelet": ca.issue("kube-apiserver", "system:masters", client=True),
            "kubelet": ca.issue(f"system:node:{NODE_NAME}", "system:nodes", client=True),
            "kubelet-serving": ca.issue(NODE_NAME, hosts=(NODE_IP, NODE_NAME)),
            "controller-manager": ca.issue("system:kube-controller-manager", client=True),
            "scheduler": ca.issue("system:kube-scheduler", client=True),
            "proxy": ca.issue("system:kube-proxy", client=True),
        }
        for name, (cert, key) in pairs.items():
            self._write(f"{name}.crt", cert)
            self._write(f"{name}.key", key)
        self.admin_cert, self.admin_key = self.dir / "admin.crt", self.dir / "admin.key"
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._write(
            "sa.key",
            sa_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        self._write(
            "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
        inside = f"https://127.0.0.1:{API_PORT}"
        for name in ("kubelet", "controller-manager", "scheduler", "proxy"):
            self._component_kubeconfig(name, inside)
        d = self.dir
        self._args = [
            *self._in_netns(),
            str(self.bin_dir / "controlplane"),
            f"-data-dir={d}",
            "-etcd-client-port=2379",
            "-etcd-peer-port=2380",
            "--",
            "--bind-address=0.0.0.0",
            f"--advertise-address={NODE_IP}",
            f"--secure-port={API_PORT}",
            f"--tls-cert-file={d / 'serving.crt'}",
            f"--tls-private-key-file={d / 'serving.key'}",
            f"--client-ca-file={self.ca_file}",
            f"--kubelet-client-certificate={d / 'apiserver-kubelet.crt'}",
            f"--kubelet-client-key={d / 'apiserver-kubelet.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
            f"--cert-dir={d / 'certs'}",
        ]

    def _component_kubeconfig(self, name: str, server: str) -> Path:
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "node",
                    "cluster": {"server": server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [
                {
                    "name": name,
                    "user": {
                        "client-certificate": str(self.dir / f"{name}.crt"),
                        "client-key": str(self.dir / f"{name}.key"),
                    },
                }
            ],
            "contexts": [{"name": name, "context": {"cluster": "node", "user": name}}],
            "current-context": name,
        }
        return self._write(f"{name}.kubeconfig", yaml.safe_dump(document).encode())

    def _forward(self) -> None:
        process, self.port = forward.start(self.netns, NODE_IP, API_PORT, self.dir / "forward.log")
        self.children["forward"] = process
        self.url = f"https://127.0.0.1:{self.port}"

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.dir / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [*self._in_netns(), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        self.children[name] = process
        return process

    def _wait(self, what: str, check: Any, timeout: float, process: str | None = None) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            if process and self.children[process].poll() is not None:
                raise RuntimeError(f"{process} exited:\n{self.component_log(process)}")
            with contextlib.suppress(Exception):
                if result := check():
                    return result
            if time.monotonic() > deadline:
                logs = process and self.component_log(process)
                raise TimeoutError(f"{what}: not after {timeout}s\n{logs or ''}")
            time.sleep(0.2)

    def component_log(self, name: str, lines: int = 40) -> str:
        return log_tail(self.dir / f"{name}.log", lines)

    @property
    def containerd_socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    def _containerd(self) -> None:
        d = self.dir / "containerd"
        (self.dir / "cni").mkdir()
        cni = {
            "cniVersion": "1.0.0",
            "name": "mcpcache",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "mcpcache0",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.dir / "cni-ipam"),
                    },
                }
            ],
        }
        (self.dir / "cni" / "10-mcpcache.conflist").write_text(json.dumps(cni))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""version = 2
root = "{d / "root"}"
state = "{d / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{d / "ttrpc.sock"}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d / "opt"}"
[{cri}]
  sandbox_image = "{self.images["pause"]}"
  # Root here lacks CAP_SYS_RESOURCE: a container may not lower its OOM score below ours.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{d / "runc"}"
[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{self.dir / "cni"}"
"""
        d.mkdir()
        (d / "config.toml").write_text(config)
        self._spawn("containerd", ["containerd", "--config", str(d / "config.toml")])
        self._wait("containerd", self._ctr_ready, 30, "containerd")
        for archive in ("mcpcache", "peers", "pause"):
            self.ctr("images", "import", str(self.images_dir / f"{archive}.tar"), timeout=300)

    def ctr(self, *args: str, timeout: float = 60) -> str:
        address = str(self.containerd_socket)
        command = ("ctr", "--address", address, "--namespace", "k8s.io", *args)
        return self._run(*command, timeout=timeout)

    def _ctr_ready(self) -> bool:
        return self.containerd_socket.exists() and bool(self.ctr("version", timeout=5))

    def _components(self) -> None:
        d, bin_dir = self.dir, self.node_bin
        self._spawn(
            "controller-manager",
            [
                str(bin_dir / "kube-controller-manager"),
                f"--kubeconfig={d / 'controller-manager.kubeconfig'}",
                f"--authentication-kubeconfig={d / 'controller-manager.kubeconfig'}",
                f"--authorization-kubeconfig={d / 'controller-manager.kubeconfig'}",
                f"--service-account-private-key-file={d / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller",
                "--profiling=false",
            ],
        )
        self._spawn(
            "scheduler",
            [
                str(bin_dir / "kube-scheduler"),
                f"--kubeconfig={d / 'scheduler.kubeconfig'}",
                f"--authentication-kubeconfig={d / 'scheduler.kubeconfig'}",
                f"--authorization-kubeconfig={d / 'scheduler.kubeconfig'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--profiling=false",
            ],
        )
        proxy = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(d / "proxy.kubeconfig")},
            "mode": "iptables",
            "hostnameOverride": NODE_NAME,
            "clusterCIDR": POD_CIDR,
            # Pod to Service to a pod on the same bridge answers through the node.
            "iptables": {"masqueradeAll": True},
            # Zero: leave the kernel's conntrack settings as they are.
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            "metricsBindAddress": "127.0.0.1:10249",
            "healthzBindAddress": "127.0.0.1:10256",
        }
        (d / "proxy.yaml").write_text(yaml.safe_dump(proxy))
        self._spawn("proxy", [str(bin_dir / "kube-proxy"), f"--config={d / 'proxy.yaml'}"])
        self._kubelet()

    def _kubelet(self) -> None:
        d = self.dir
        for controller in CGROUPS.iterdir():
            if controller.is_symlink() or not (controller / "cgroup.procs").exists():
                continue
            (controller / self.cgroup).mkdir(exist_ok=True)
            if controller.name == "cpuset":
                for name in ("cpuset.cpus", "cpuset.mems"):
                    value = (controller / name).read_text()
                    (controller / self.cgroup / name).write_text(value)
        self.saved_settings = _claim_kernel_settings(self.id)
        (d / "resolv.conf").write_text("")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This machine's cgroups are v1, which a 1.35 kubelet refuses unless told.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup}",
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "address": NODE_IP,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "tlsCertFile": str(d / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(d / "kubelet-serving.key"),
            "authentication": {
                "x509": {"clientCAFile": str(self.ca_file)},
                "webhook": {"enabled": False},
                "anonymous": {"enabled": False},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "resolvConf": str(d / "resolv.conf"),
            "clusterDomain": "cluster.local",
            "podLogsDir": str(d / "pod-logs"),
            "failSwapOn": False,
            # How often a pod's mounted ConfigMaps are brought up to date (default 1m).
            "syncFrequency": "10s",
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
        }
        (d / "kubelet.yaml").write_text(yaml.safe_dump(config))
        self._spawn(
            "kubelet",
            [
                str(self.node_bin / "kubelet"),
                f"--config={d / 'kubelet.yaml'}",
                f"--kubeconfig={d / 'kubelet.kubeconfig'}",
                f"--root-dir={d / 'kubelet'}",
                f"--cert-dir={d / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ],
        )

    def _wait_node(self, timeout: float) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())

        def ready() -> bool:
            node = core.read_node(NODE_NAME)
            conditions = {c.type: c.status for c in node.status.conditions or []}
            return conditions.get("Ready") == "True"

        self._wait("the node to be Ready", ready, timeout, "kubelet")
        self._wait(
            "the default service account",
            lambda: core.read_namespaced_service_account("default", "default"),
            timeout,
            "controller-manager",
        )
        self._wait(
            "kube-root-ca.crt",
            lambda: core.read_namespaced_config_map("kube-root-ca.crt", "default"),
            timeout,
            "controller-manager",
        )

    # Stop.

    def stop(self) -> None:
        """Everything down, each step whatever the others did."""
        steps = (
            self._stop_pods,
            self._stop_components,
            self._kill_containers,
            self._stop_containerd,
            self._unmount,
            self._remove_cgroups,
            self._remove_netns,
            self._restore_settings,
        )
        errors = []
        for step in steps:
            try:
                step()
            except Exception as error:
                errors.append(f"{step.__name__}: {error}")
        shutil.rmtree(self.dir, ignore_errors=True)
        if errors:
            raise RuntimeError("node teardown: " + "; ".join(errors))

    def _stop_pods(self) -> None:
        """Sandboxes stopped through the CRI by the kubelet would take each pod's grace
        period; containerd's own client kills them at once and ends their shims."""
        if not self.containerd_socket.exists() or "containerd" not in self.children:
            return
        if self.children["containerd"].poll() is not None:
            return
        for name in ("kubelet",):
            if process := self.children.get(name):
                end_process_group(process)
        for line in self.ctr("tasks", "ls", "-q", timeout=30).split():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.ctr("tasks", "kill", "--signal", "SIGKILL", line, timeout=10)
        deadline = time.monotonic() + 20
        for line in self.ctr("tasks", "ls", "-q", timeout=30).split():
            while time.monotonic() < deadline:
                try:
                    self.ctr("tasks", "delete", line, timeout=10)
                    break
                except (RuntimeError, subprocess.TimeoutExpired):
                    time.sleep(0.2)
        for line in self.ctr("containers", "ls", "-q", timeout=30).split():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.ctr("containers", "delete", line, timeout=10)

    def _stop_components(self) -> None:
        for name in ("kubelet", "proxy", "scheduler", "controller-manager"):
            if process := self.children.get(name):
                end_process_group(process)

    def _cgroup_pids(self) -> set[int]:
        pids: set[int] = set()
        for controller in CGROUPS.iterdir():
            root = controller / self.cgroup
            if root.is_dir():
                for procs in root.rglob("cgroup.procs"):
                    with contextlib.suppress(OSError):
                        pids.update(int(p) for p in procs.read_text().split())
        return pids

    def _kill_containers(self) -> None:
        """Whatever still runs in this node's cgroups, and any shim of its containerd."""
        deadline = time.monotonic() + 20
        while pids := self._cgroup_pids() | set(_pids_with(str(self.containerd_socket))):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes left: {sorted(pids)}")
            time.sleep(0.1)

    def _stop_containerd(self) -> None:
        for name in ("containerd", "forward"):
            if process := self.children.get(name):
                end_process_group(process)
        self._terminate()

    def _unmount(self) -> None:
        for point in sorted(_mounts_under(str(self.dir)), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        if left := _mounts_under(str(self.dir)):
            raise RuntimeError(f"mounts left: {left}")

    def _remove_cgroups(self) -> None:
        for controller in CGROUPS.iterdir():
            root = controller / self.cgroup
            if not root.is_dir():
                continue
            for directory in sorted(
                (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
            ):
                directory.rmdir()
            root.rmdir()

    def _remove_netns(self) -> None:
        if Path("/run/netns", self.netns).exists():
            self._run("ip", "netns", "delete", self.netns)

    def _restore_settings(self) -> None:
        if self.saved_settings:
            _release_kernel_settings(self.id)

    def leftovers(self) -> list[str]:
        """What of this node is still on the machine (empty after a clean `stop()`)."""
        left = []
        left += [f"process {pid}" for pid, p in self._live_children()]
        left += [f"process {pid}" for pid in _pids_with(str(self.dir))]
        left += [f"mount {m}" for m in _mounts_under(str(self.dir))]
        left += [f"cgroup {c}" for c in CGROUPS.glob(f"*/{self.cgroup}")]
        if Path("/run/netns", self.netns).exists():
            left.append(f"netns {self.netns}")
        with _kernel_state() as state:
            others = set(state["owners"]) - {self.id}
        for setting, value in self.saved_settings.items():
            if not others and Path("/proc/sys", setting).read_text().strip() != value:
                left.append(f"sysctl {setting}")
        if self.dir.exists():
            left.append(f"directory {self.dir}")
        return left

    def _live_children(self) -> list[tuple[int, subprocess.Popen[bytes]]]:
        return [(p.pid, p) for p in self.children.values() if p.poll() is None]
