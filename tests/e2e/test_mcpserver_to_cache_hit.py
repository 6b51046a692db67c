"""End to end: an MCPServer applied with kubectl becomes a cache hit an agent can see.

MCPServer YAML -> the operator writes the namespace's ConfigMap -> the ConfigMap's
content lands in a sidecar process's config file, projected the way the kubelet does it
(a symlink through `..data`, swapped atomically on each change) -> the sidecar reloads
-> an SDK client's second identical call is a hit -> /metrics shows it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families

from peers.clients import http_get, mcp_client
from peers.kubelet import project as project_files
from peers.serving import async_wait_until, wait_until
from peers.sidecar import following_servers_file, parse_samples
from peers.sidecar import sample as sample_of


def hits(metrics_url: str, server: str) -> float:
    text = http_get(f"{metrics_url}/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "mcpcache_requests_total" and sample.labels == {
                "server": server,
                "method": "tools/call",
                "outcome": "hit",
            }:
                return sample.value
    return 0.0


@pytest.fixture
def sidecar_process(tmp_path: Path) -> Iterator[tuple[Path, str, str]]:
    """A real `mcpcache sidecar` process whose config file does not exist yet, as in a
    pod that starts before its namespace's ConfigMap is written."""
    config_file = tmp_path / "mounted" / "config.yaml"
    config_file.parent.mkdir()
    with following_servers_file(config_file, "docs", MCPCACHE_APP_ID="e2e-agent") as urls:
        yield config_file, *urls


def apply_docs(control_plane, base_url: str, tmp_path: Path, cache: str = "") -> str:
    """A new namespace with an MCPServer `docs` applied by kubectl; returns the namespace."""
    namespace = f"e2e-{uuid.uuid4().hex[:8]}"
    control_plane.run_kubectl("create", "namespace", namespace)
    manifest = tmp_path / "mcpserver.yaml"
    manifest.write_text(
        f"""
apiVersion: mcpcache.io/v1alpha1
kind: MCPServer
metadata: {{name: docs, namespace: {namespace}}}
spec:
  endpoint:
    streamableHTTP:
      url: {base_url}/mcp
  cache:
    enabled: true
{cache}"""
    )
    control_plane.run_kubectl("apply", "-f", str(manifest))
    return namespace


async def test_an_applied_mcpserver_is_cached_by_a_sidecar(
    control_plane, operator, upstream, sidecar_process, tmp_path: Path
) -> None:
    peer, app = upstream
    namespace = apply_docs(control_plane, app.base_url, tmp_path, "    ttl: 60s\n")
    core = client.CoreV1Api(control_plane.api_client())
    config_file, proxy_url, metrics_url = sidecar_process
    await async_wait_until(lambda: _ok(f"{metrics_url}/readyz"), 30, "the sidecar to be ready")
    assert _status(proxy_url) == 404, "no servers before the ConfigMap is projected"

    project(core, namespace, config_file, "name: docs")
    await async_wait_until(lambda: _status(proxy_url) != 404, 30, "the sidecar to reload")

    text = uuid.uuid4().hex
    async with mcp_client(proxy_url) as agent:
        calls = peer.calls["echo"]
        first = await agent.call_tool("echo", {"text": text})
        second = await agent.call_tool("echo", {"text": text})
    assert second.content == first.content
    assert peer.calls["echo"] == calls + 1
    await async_wait_until(lambda: hits(metrics_url, "docs") == 1, what="the hit in /metrics")


def _ok(url: str) -> bool:
    try:
        return http_get(url).status_code == 200
    except httpx.HTTPError:
        return False


def _status(url: str) -> int:
    return httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code


def project(core: client.CoreV1Api, namespace: str, config_file: Path, holds: str) -> str:
    """Wait for the namespace's ConfigMap to hold `holds`, then project it into the file
    as the kubelet does (a `..data` symlink swap; the file's name stays a symlink)."""

    def content() -> str | None:
        try:
            data = core.read_namespaced_config_map("mcpcache-servers", namespace).data
        except ApiException:
            return None
        text = data.get("config.yaml", "")
        return text if holds in text else None

    text: str = wait_until(content, 30, f"the ConfigMap to hold {holds!r}")
    project_files(config_file.parent, {config_file.name: text})
    assert config_file.is_symlink()
    return text


def metric(metrics_url: str, name: str, **labels: str) -> float:
    return sample_of(parse_samples(http_get(f"{metrics_url}/metrics").text), name, **labels)


async def test_a_purge_annotation_empties_the_servers_entries_in_a_running_sidecar(
    control_plane, operator, upstream, sidecar_process, tmp_path: Path
) -> None:
    peer, app = upstream
    rules = '    ttl: 10m\n    tools:\n      - {name: "update_*", invalidates: ["get_*"]}\n'
    namespace = apply_docs(control_plane, app.base_url, tmp_path, rules)
    core = client.CoreV1Api(control_plane.api_client())
    config_file, proxy_url, metrics_url = sidecar_process
    await async_wait_until(lambda: _ok(f"{metrics_url}/readyz"), 30, "the sidecar to be ready")
    project(core, namespace, config_file, "name: docs")
    await async_wait_until(lambda: _status(proxy_url) != 404, 30, "the sidecar to load docs")

    text = uuid.uuid4().hex
    async with mcp_client(proxy_url) as agent:
        await agent.call_tool("echo", {"text": text})
        await agent.call_tool("echo", {"text": text})
        echoes = peer.calls["echo"]

        stamp = str(int(time.time()))
        control_plane.run_kubectl(
            "annotate", "mcps", "docs", "-n", namespace,
            f"mcpcache.io/purge={stamp}", "--overwrite",
        )  # fmt: skip
        project(core, namespace, config_file, f"purge: '{stamp}'")
        purges = {"server": "docs", "cause": "purge"}
        await async_wait_until(
            lambda: metric(metrics_url, "mcpcache_invalidations_total", **purges) == 1,
            30,
            "the sidecar to purge docs",
        )
        await agent.call_tool("echo", {"text": text})
        assert peer.calls["echo"] == echoes + 1, "the purged entry was not served"
        await agent.call_tool("echo", {"text": text})
        assert peer.calls["echo"] == echoes + 1, "and the new answer is cached again"

    objects = client.CustomObjectsApi(control_plane.api_client())
    status = wait_until(
        lambda: (
            (
                s := objects.get_namespaced_custom_object(
                    "mcpcache.io", "v1alpha1", namespace, "mcpservers", "docs"
                ).get("status", {})
            ).get("lastPurge")
            == stamp
            and s
        ),
        30,
        "the purge in status",
    )
    assert status["effectiveTools"][0]["invalidates"] == ["get_*"]
    # The event is posted beside the status, not before it: wait for it too.
    wait_until(
        lambda: any(
            e.reason == "PurgePropagated" and stamp in e.message
            for e in core.list_namespaced_event(namespace).items
        ),
        30,
        "the PurgePropagated event",
    )
