"""What an idle sidecar loads: probes and scrapes are served without FastAPI, which only
the admin endpoints load, on their first request (benchmarks/idle_memory.py measures
what that saves)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parents[2]

SCRIPT = """
import json, sys
from pathlib import Path
from peers.clients import http_get
from peers.sidecar import RunningSidecar, one_server

sidecar = RunningSidecar(Path(sys.argv[1]), one_server("http://127.0.0.1:9/mcp")).start()
try:
    statuses = [
        http_get(sidecar.metrics_url + path, timeout=10).status_code
        for path in ("/metrics", "/healthz", "/readyz")
    ]
    idle = "fastapi" in sys.modules
    stats = http_get(f"http://127.0.0.1:{sidecar.port}/admin/stats", timeout=10)
    print(json.dumps([statuses, idle, stats.status_code, "fastapi" in sys.modules]))
finally:
    sidecar.stop()
"""


def test_an_idle_sidecar_serves_probes_and_scrapes_without_loading_fastapi(
    tmp_path: Path,
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "sidecar.yaml")],
        capture_output=True,
        text=True,
        cwd=TESTS,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(TESTS)},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    statuses, idle, admin_status, after_admin = json.loads(out.stdout.splitlines()[-1])
    assert statuses == [200, 200, 200]
    assert idle is False, "an idle sidecar has not imported fastapi"
    assert (admin_status, after_admin) == (200, True), "the admin endpoints load it"
