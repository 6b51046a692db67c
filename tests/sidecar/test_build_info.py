"""Which mcpcache a sidecar runs, on its /metrics: what a fleet upgrade counts."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from peers.clients import http_get
from peers.serving import free_port
from peers.sidecar import RunningSidecar


def test_the_sidecar_exports_its_version_as_build_info(tmp_path: Path) -> None:
    document = {"servers": [{"name": "docs", "url": f"http://127.0.0.1:{free_port()}/mcp"}]}
    sidecar = RunningSidecar(tmp_path / "sidecar.yaml", document)
    sidecar.start()
    try:
        text = http_get(f"{sidecar.metrics_url}/metrics", timeout=10).text
    finally:
        sidecar.stop()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "mcpcache_build_info"]
    assert [(s.labels, s.value) for s in family.samples] == [
        ({"version": importlib.metadata.version("mcpcache")}, 1.0)
    ]
