"""End to end: an MCPServer's `timeout` reaches the sidecar, so a tool that thinks for
longer than the default 30 s answers in Kubernetes as it does from a sidecar file.

MCPServer with `spec.endpoint.streamableHTTP.timeout` -> the operator's ConfigMap ->
projected into a real `mcpcache sidecar` process -> an SDK client's call to a tool that
answers after the default timeout has passed.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from mcp import MCPError

from mcpcache.sidecar.config import parse_servers_file
from peers.clients import http_get, mcp_client
from peers.kubelet import project
from peers.serving import async_wait_until, wait_until
from peers.sidecar import following_servers_file

DEFAULT_TIMEOUT = 30.0


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[tuple[Path, str, str]]:
    """A real sidecar following a servers file that does not exist yet (as in a pod)."""
    config_file = tmp_path / "mounted" / "config.yaml"
    config_file.parent.mkdir()
    with following_servers_file(config_file, "thinker") as (url, metrics_url):
        yield config_file, url, metrics_url


def apply_thinker(control_plane, url: str, timeout: str, tmp_path: Path) -> str:
    namespace = f"slow-{uuid.uuid4().hex[:8]}"
    control_plane.run_kubectl("create", "namespace", namespace)
    manifest = tmp_path / f"thinker-{timeout}.yaml"
    manifest.write_text(
        f"""
apiVersion: mcpcache.io/v1alpha1
kind: MCPServer
metadata: {{name: thinker, namespace: {namespace}}}
spec:
  endpoint:
    streamableHTTP:
      url: {url}/mcp
      timeout: {timeout}
"""
    )
    control_plane.run_kubectl("apply", "-f", str(manifest))
    return namespace


def follow_configmap(control_plane, namespace: str, config_file: Path, timeout: float) -> None:
    """Project the namespace's ConfigMap into the sidecar's file once it holds the server
    with `timeout`, as the kubelet would."""
    core = client.CoreV1Api(control_plane.api_client())

    def written() -> str | None:
        try:
            configmap = core.read_namespaced_config_map(
                "mcpcache-servers", namespace, _request_timeout=30
            )
        except ApiException:
            return None
        text = (configmap.data or {}).get("config.yaml", "")
        servers = parse_servers_file(text, environ={}).servers if text else ()
        return text if any(s.timeout == timeout for s in servers) else None

    text: str = wait_until(written, 30, f"the ConfigMap to hold timeout {timeout:g}s")
    project(config_file.parent, {config_file.name: text})


def loaded(url: str) -> bool:
    try:
        answer = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=5)
    except httpx.HTTPError:
        return False
    return answer.status_code != 404


def ready(metrics_url: str) -> bool:
    try:
        return http_get(f"{metrics_url}/readyz").status_code == 200
    except httpx.HTTPError:
        return False


async def test_a_short_timeout_on_the_mcpserver_reaches_the_sidecar(
    control_plane, operator, json_upstream, sidecar, tmp_path: Path
) -> None:
    peer, app = json_upstream
    config_file, proxy_url, metrics_url = sidecar
    namespace = apply_thinker(control_plane, app.base_url, "1s", tmp_path)
    await async_wait_until(lambda: ready(metrics_url), 30, "the sidecar to be ready")
    follow_configmap(control_plane, namespace, config_file, 1.0)
    await async_wait_until(lambda: loaded(proxy_url), 30, "the sidecar to load thinker")

    gate = f"short-{uuid.uuid4().hex}"
    try:
        async with mcp_client(proxy_url) as agent:
            with pytest.raises(MCPError, match="did not answer within 1s"):
                await agent.call_tool("slow", {"steps": 0, "gate": gate})
    finally:
        peer.gate(gate).set()


@pytest.mark.slow
async def test_a_tool_slower_than_the_default_timeout_answers_with_a_longer_one(
    control_plane, operator, json_upstream, sidecar, tmp_path: Path
) -> None:
    peer, app = json_upstream
    config_file, proxy_url, metrics_url = sidecar
    namespace = apply_thinker(control_plane, app.base_url, "45s", tmp_path)
    await async_wait_until(lambda: ready(metrics_url), 30, "the sidecar to be ready")
    follow_configmap(control_plane, namespace, config_file, 45.0)
    await async_wait_until(lambda: loaded(proxy_url), 30, "the sidecar to load thinker")

    # The tool thinks for a while past the default timeout, in silence (a JSON answer
    # sends no byte before it is done): with the default, the sidecar would give up.
    gate = f"long-{uuid.uuid4().hex}"
    thinking = threading.Timer(DEFAULT_TIMEOUT + 2, peer.gate(gate).set)
    thinking.start()
    try:
        async with mcp_client(proxy_url, read_timeout_seconds=60) as agent:
            result = await agent.call_tool("slow", {"steps": 0, "gate": gate})
    finally:
        thinking.cancel()
        peer.gate(gate).set()
    assert not result.is_error
    assert result.content[0].text == "done after 0 steps"
