"""The MCPServer CRD, as the real API server enforces it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from peers.paths import CHART, CRD, ROOT
from peers.resources import GROUP, PLURAL, VERSION, mcpserver, new_namespace


@pytest.fixture
def namespace(control_plane, crd) -> str:
    return new_namespace(control_plane, "crd")


def test_the_chart_carries_the_same_crd() -> None:
    assert (CHART / "crds" / CRD.name).read_text() == CRD.read_text()


def test_defaults_are_filled_in(control_plane, namespace) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    created = objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("plain")
    )
    assert created["spec"]["cache"] == {"enabled": False, "ttl": "30s", "maxSize": "64Ki"}


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (mcpserver("a", url="ftp://files.example/mcp"), "must be an absolute http or https URL"),
        (mcpserver("b", url="not a url"), "must be an absolute http or https URL"),
        (mcpserver("c", ttl="5 minutes"), "spec.cache.ttl"),
        (mcpserver("d", metadataTTL="soon"), "spec.cache.metadataTTL"),
        (mcpserver("d2", staleIfError="a while"), "spec.cache.staleIfError"),
        (mcpserver("d3", staleWhileRevalidate="-1s"), "spec.cache.staleWhileRevalidate"),
        (mcpserver("e", maxSize="lots"), "spec.cache.maxSize"),
        (mcpserver("f", enabled="yes"), "spec.cache.enabled"),
        ({**mcpserver("g"), "spec": {}}, "spec.endpoint: Required value"),
    ],
)
def test_invalid_objects_are_refused_with_a_reason(
    control_plane, namespace, body, complaint
) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    with pytest.raises(ApiException) as refused:
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    assert refused.value.status == 422
    assert complaint in refused.value.body


def test_metadata_ttl_and_large_max_size_are_accepted(control_plane, namespace) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    body = mcpserver("big", enabled=True, maxSize="8Mi", metadataTTL="5m")
    created = objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    assert created["spec"]["cache"]["maxSize"] == "8Mi"


def test_stale_windows_are_accepted(control_plane, namespace) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    body = mcpserver("stale", enabled=True, staleIfError="10m", staleWhileRevalidate="30s")
    created = objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    assert created["spec"]["cache"]["staleIfError"] == "10m"
    assert created["spec"]["cache"]["staleWhileRevalidate"] == "30s"


def test_every_example_applies_cleanly(control_plane, crd, tmp_path: Path) -> None:
    examples = sorted((ROOT / "examples" / "kubernetes").glob("*.yaml"))
    assert examples
    namespaces = {
        doc["metadata"].get("namespace")
        for path in examples
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    }
    for name in namespaces - {None}:
        control_plane.run_kubectl("create", "namespace", name, check=False)
    for path in examples:
        result = control_plane.run_kubectl(
            "apply", "--dry-run=server", "-f", str(path), check=False
        )
        assert result.returncode == 0, f"{path.name}: {result.stderr}"


def test_kubectl_shows_the_printer_columns_and_short_name(control_plane, namespace) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("shown", enabled=True)
    )
    out = control_plane.run_kubectl("get", "mcps", "-n", namespace).stdout
    header = out.splitlines()[0].split()
    assert header[:4] == ["NAME", "URL", "CACHE", "TTL"]
    assert "READY" in header
    assert "AGE" in header
    assert "http://docs.tools.svc:8000/mcp" in out
