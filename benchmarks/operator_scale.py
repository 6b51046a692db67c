"""The operator at scale: N MCPServers in N/10 namespaces on the test control plane.

For each N, a fresh control plane (etcd + kube-apiserver, the binaries the tests use)
and the operator as its own process, as its own service account with the chart's RBAC,
at INFO. Reports the time to converge after a bulk create (from the last create), after
patching 10 % of the servers, the operator's peak RSS and CPU seconds, its writes and
reads to the API (its own counters: every request but the watches' and the Lease's
goes through one client), and a restart's time to quiet with the writes it made (goal: none).

Converged means: every namespace's ConfigMap lists its servers with their current
settings and every MCPServer's status has caught up with its generation, as the API
server says (one LIST of each, polled).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml
from prometheus_client.parser import text_string_to_metric_families

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from peers.controlplane import BIN_ENV, Authority, ControlPlane  # noqa: E402
from peers.operator import (  # noqa: E402
    OPERATOR_NAMESPACE,
    OperatorProcess,
    install_operator_rbac,
)
from peers.paths import CHART, CRD  # noqa: E402

GROUP, VERSION, PLURAL = "mcpcache.io", "v1alpha1", "mcpservers"
PER_NAMESPACE = 10
WRITES = (("POST", "configmaps"), ("PUT", "configmaps"), ("PATCH", "mcpservers"))


class Api:
    """An admin client for the benchmark's own creates, patches and checks."""

    def __init__(self, plane: ControlPlane) -> None:
        context = ssl.create_default_context(cafile=str(plane.ca_file))
        context.load_cert_chain(plane.admin_cert, plane.admin_key)
        self.client = httpx.AsyncClient(
            base_url=plane.url,
            verify=context,
            timeout=60,
            limits=httpx.Limits(max_connections=16),
        )
        self.lists = 0

    async def send(self, method: str, path: str, body: Any = None, patch: bool = False) -> Any:
        headers = {"Content-Type": "application/merge-patch+json"} if patch else {}
        response = await self.client.request(method, path, json=body, headers=headers)
        response.raise_for_status()
        return response.json()

    async def list(self, path: str) -> list[dict[str, Any]]:
        self.lists += 1
        return list((await self.send("GET", path))["items"])


def server_body(name: str, ttl: str = "30s") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MCPServer",
        "metadata": {"name": name},
        "spec": {
            "endpoint": {"streamableHTTP": {"url": f"http://{name}.tools.svc:8000/mcp"}},
            "cache": {"enabled": True, "ttl": ttl, "maxSize": "128Ki"},
        },
    }


def samples(operator: OperatorProcess) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, s.labels, float(s.value))
        for family in text_string_to_metric_families(operator.metrics())
        for s in family.samples
    ]


def operator_counts(operator: OperatorProcess) -> dict[str, float]:
    found = samples(operator)
    writes = sum(
        v
        for n, labels, v in found
        if n == "mcpcache_operator_api_requests_total"
        and (labels.get("method"), labels.get("resource")) in WRITES
    )
    reads = sum(
        v
        for n, labels, v in found
        if n == "mcpcache_operator_api_requests_total"
        and labels.get("method") == "GET"
        and labels.get("resource") != "leases"
    )
    servers = sum(v for n, _, v in found if n == "mcpcache_operator_mcpservers")
    pending = sum(v for n, _, v in found if n == "mcpcache_operator_reconcile_pending")
    leader = sum(v for n, _, v in found if n == "mcpcache_operator_leader")
    return {"writes": writes, "reads": reads, "servers": servers, "pending": pending,
            "leader": leader}  # fmt: skip


def cpu_seconds(operator: OperatorProcess) -> float:
    assert operator.process is not None
    times = psutil.Process(operator.process.pid).cpu_times()
    return float(times.user + times.system)


def peak_rss_mib(operator: OperatorProcess) -> float:
    assert operator.process is not None
    for line in Path(f"/proc/{operator.process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def converged(api: Api, expected: dict[str, dict[str, str]]) -> bool:
    """Every namespace's ConfigMap holds its servers with the expected ttl, and every
    status has observed its generation."""
    configmaps = await api.list("/api/v1/configmaps?fieldSelector=metadata.name%3Dmcpcache-servers")
    found: dict[str, dict[str, str]] = {}
    for configmap in configmaps:
        document = yaml.load(configmap["data"]["config.yaml"], Loader=yaml.CSafeLoader)
        found[configmap["metadata"]["namespace"]] = {
            s["name"]: s.get("cache", {}).get("ttl") for s in document["servers"]
        }
    if found != expected:
        return False
    for item in await api.list(f"/apis/{GROUP}/{VERSION}/{PLURAL}"):
        status = item.get("status") or {}
        if status.get("observedGeneration") != item["metadata"]["generation"]:
            return False
    return True


async def wait_converged(
    api: Api, operator: OperatorProcess, expected: dict[str, dict[str, str]], limit: float
) -> float:
    """Seconds until converged, polling the operator's own gauges first (cheap) and
    the API server to confirm."""
    started = time.monotonic()
    total = sum(len(s) for s in expected.values())
    while time.monotonic() - started < limit:
        counts = operator_counts(operator)
        if counts["pending"] == 0 and counts["servers"] == total and await converged(api, expected):
            return time.monotonic() - started
        await asyncio.sleep(0.25)
    raise TimeoutError(f"not converged after {limit}s")


def ttl_of(seconds: int) -> str:
    return f"{seconds}s"


def keep_log(operator: OperatorProcess, name: str) -> None:
    """With $MCPCACHE_BENCH_LOGS, the operator's log so far is kept there."""
    if logs := os.environ.get("MCPCACHE_BENCH_LOGS"):
        Path(logs, name).write_bytes(operator.log_path.read_bytes())
        operator.log_path.write_bytes(b"")


async def run_one(plane: ControlPlane, kubeconfig: Path, cert: Authority, n: int) -> dict:
    api = Api(plane)
    namespaces = [f"bench-{i:05d}" for i in range(max(1, n // PER_NAMESPACE))]
    for namespace in namespaces:
        await api.send("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    operator = OperatorProcess(kubeconfig, cert, log_level="INFO").start()
    try:
        deadline = time.monotonic() + 60
        while operator_counts(operator)["leader"] != 1:
            if time.monotonic() > deadline:
                raise TimeoutError("the operator never took the lease")
            await asyncio.sleep(0.2)
        cpu_before = cpu_seconds(operator)
        expected = {ns: {f"s{j}": "30s" for j in range(PER_NAMESPACE)} for ns in namespaces}
        names = [(ns, f"s{j}") for ns in namespaces for j in range(PER_NAMESPACE)]

        semaphore = asyncio.Semaphore(16)

        async def create(namespace: str, name: str) -> None:
            async with semaphore:
                path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
                await api.send("POST", path, server_body(name))

        started = time.monotonic()
        await asyncio.gather(*(create(ns, name) for ns, name in names))
        create_seconds = time.monotonic() - started
        bulk = await wait_converged(api, operator, expected, 600)
        cpu_bulk = cpu_seconds(operator) - cpu_before

        patched = random.Random(19).sample(names, max(1, n // 10))

        async def patch(namespace: str, name: str) -> None:
            async with semaphore:
                path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
                await api.send("PATCH", path, {"spec": {"cache": {"ttl": "45s"}}}, patch=True)

        for ns, name in patched:
            expected[ns][name] = "45s"
        cpu_before_patch = cpu_seconds(operator)
        await asyncio.gather(*(patch(ns, name) for ns, name in patched))
        patch_seconds = await wait_converged(api, operator, expected, 600)
        cpu_patch = cpu_seconds(operator) - cpu_before_patch
        counts = operator_counts(operator)
        rss = peak_rss_mib(operator)
        cpu_total = cpu_seconds(operator)
        operator.terminate()
        keep_log(operator, f"operator-{n}-first.log")

        # A restart with everything in place: quiet when it holds the Lease, has passed
        # over every namespace, and nothing is pending.
        restarted_at = time.monotonic()
        operator.start()
        while True:
            now = operator_counts(operator)
            if now["leader"] == 1 and now["pending"] == 0 and now["servers"] == n:
                break
            if time.monotonic() - restarted_at > 300:
                raise TimeoutError("the restarted operator never settled")
            await asyncio.sleep(0.1)
        quiet = time.monotonic() - restarted_at
        restart = operator_counts(operator)
        result = {
            "mcpservers": n,
            "namespaces": len(namespaces),
            "create_seconds": round(create_seconds, 1),
            "converged_after_last_create_s": round(bulk, 1),
            "patched_10pct_converged_s": round(patch_seconds, 1),
            "peak_rss_mib": round(rss),
            "cpu_seconds": round(cpu_total, 1),
            "cpu_ms_per_mcpserver_bulk": round(cpu_bulk / n * 1000, 2),
            "cpu_seconds_patch": round(cpu_patch, 1),
            "writes": int(counts["writes"]),
            "reads": int(counts["reads"]),
            "restart_quiet_s": round(quiet, 1),
            "restart_writes": int(restart["writes"]),
            "restart_cpu_seconds": round(cpu_seconds(operator), 1),
            "restart_peak_rss_mib": round(peak_rss_mib(operator)),
        }
        return result
    finally:
        keep_log(operator, f"operator-{n}.log")
        operator.stop()
        await api.client.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sizes", nargs="*", type=int, default=[1000, 3000])
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    bin_dir = os.environ.get(BIN_ENV)
    if not bin_dir:
        parser.error(f"{BIN_ENV} must name the control plane's binaries (benchmarks/operator.sh)")
    results = []
    for n in args.sizes:
        plane = ControlPlane(Path(bin_dir)).start()
        try:
            plane.run_kubectl("apply", "-f", str(CRD))
            plane.run_kubectl("create", "namespace", OPERATOR_NAMESPACE)
            kubeconfig = install_operator_rbac(plane, CHART, OPERATOR_NAMESPACE)
            cert = Authority.create("bench-webhook-ca")
            result = asyncio.run(run_one(plane, kubeconfig, cert, n))
        finally:
            plane.stop()
        results.append(result)
        print(json.dumps(result), flush=True)
    header = (
        "| MCPServers / namespaces | converged after bulk create | 10 % patched → converged "
        "| peak RSS | CPU (ms per MCPServer, bulk) | writes / reads "
        "| restart: quiet after, writes |"
    )
    print("\n" + header + "\n|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['mcpservers']} / {r['namespaces']} | {r['converged_after_last_create_s']} s "
            f"| {r['patched_10pct_converged_s']} s | {r['peak_rss_mib']} MiB "
            f"| {r['cpu_seconds']} s ({r['cpu_ms_per_mcpserver_bulk']}) "
            f"| {r['writes']} / {r['reads']} "
            f"| {r['restart_quiet_s']} s, {r['restart_writes']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
