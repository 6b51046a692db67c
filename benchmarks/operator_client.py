"""What one write costs the operator's process: the `kubernetes` package against the
operator's own client (`mcpcache.operator.kube.api`), on the test control plane.

N status patches of N MCPServers (merge patches, as a pass writes them), each client
sending them with the same concurrency (the package: a thread pool, as kopf and
asyncio callers use it; ours: on the event loop). Reports CPU milliseconds of this
process per call and wall seconds. Run: `bash benchmarks/operator_client.sh [N]`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from mcpcache.operator.crd import COLLECTION  # noqa: E402
from mcpcache.operator.crd import RESOURCE_GROUP as GROUP  # noqa: E402
from mcpcache.operator.crd import RESOURCE_PLURAL as PLURAL  # noqa: E402
from mcpcache.operator.crd import RESOURCE_VERSION as VERSION  # noqa: E402
from mcpcache.operator.kube.api import MERGE_PATCH, KubeAPI  # noqa: E402
from mcpcache.operator.metrics import OperatorMetrics  # noqa: E402
from peers.controlplane import BIN_ENV, ControlPlane  # noqa: E402
from peers.paths import CRD  # noqa: E402

NAMESPACE = "bench"
CONCURRENCY = 16


def status(i: int, round_: int) -> dict[str, Any]:
    return {"status": {"observedGeneration": 1, "effectiveTTL": f"{30 + round_}s", "n": i}}


def with_package(plane: ControlPlane, n: int, round_: int) -> tuple[float, float]:
    api = client.CustomObjectsApi(plane.api_client())

    def patch(i: int) -> None:
        api.patch_namespaced_custom_object_status(
            GROUP, VERSION, NAMESPACE, PLURAL, f"s{i}", status(i, round_), _request_timeout=30
        )

    cpu, wall = time.process_time(), time.monotonic()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(patch, range(n)))
    return time.process_time() - cpu, time.monotonic() - wall


async def with_own_client(plane: ControlPlane, n: int, round_: int) -> tuple[float, float]:
    configuration = client.Configuration()
    config.load_kube_config(str(plane.kubeconfig), client_configuration=configuration)
    api = KubeAPI(configuration, OperatorMetrics(), connections=CONCURRENCY)
    semaphore = asyncio.Semaphore(CONCURRENCY)

    async def patch(i: int) -> None:
        path = f"{COLLECTION}/namespaces/{NAMESPACE}/{PLURAL}/s{i}/status"
        async with semaphore:
            await api.request("PATCH", "mcpservers", path, status(i, round_), MERGE_PATCH)

    try:
        cpu, wall = time.process_time(), time.monotonic()
        await asyncio.gather(*(patch(i) for i in range(n)))
        return time.process_time() - cpu, time.monotonic() - wall
    finally:
        await api.close()


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    plane = ControlPlane(Path(os.environ[BIN_ENV])).start()
    try:
        plane.run_kubectl("apply", "-f", str(CRD))
        plane.run_kubectl("wait", "--for=condition=Established", "crd/mcpservers.mcpcache.io")
        plane.run_kubectl("create", "namespace", NAMESPACE)
        objects = client.CustomObjectsApi(plane.api_client())
        for i in range(n):
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "MCPServer",
                "metadata": {"name": f"s{i}"},
                "spec": {"endpoint": {"streamableHTTP": {"url": "http://x.tools.svc:8000/mcp"}}},
            }
            objects.create_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, PLURAL, body, _request_timeout=30
            )
        results = {}
        for round_ in range(2):  # the second round is the figure: warm pools, caches
            package = with_package(plane, n, 2 * round_)
            own = asyncio.run(with_own_client(plane, n, 2 * round_ + 1))
        for name, (cpu, wall) in (("kubernetes package", package), ("own client", own)):
            results[name] = {"cpu_ms_per_call": round(cpu / n * 1000, 3), "wall_s": round(wall, 1)}
        print(json.dumps({"calls": n, "concurrency": CONCURRENCY, **results}))
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
