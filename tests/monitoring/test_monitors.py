"""The chart's Prometheus Operator objects, checked by an API server that has the
Prometheus Operator's own CRDs (from its Go module; see tests/prometheus/build.sh)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from peers.controlplane import ControlPlane
from peers.paths import CHART, ROOT
from peers.serving import wait_until

NAMESPACE = "monitoring-checks"


@pytest.fixture(scope="module")
def monitoring_crds(control_plane: ControlPlane, operator_crds: Path) -> list[str]:
    """Apply the CRDs (server-side: they are too large for the last-applied annotation)."""
    names = []
    for crd in sorted(operator_crds.glob("*.yaml")):
        control_plane.run_kubectl("apply", "--server-side", "-f", str(crd))
        names.append(yaml.safe_load(crd.read_text())["metadata"]["name"])
    extensions = client.ApiextensionsV1Api(control_plane.api_client())

    def established() -> bool:
        for name in names:
            conditions = extensions.read_custom_resource_definition(name).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    wait_until(established, 30, "the Prometheus Operator's CRDs")
    core = client.CoreV1Api(control_plane.api_client())
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    return names


def dry_run(plane: ControlPlane, manifest: str, tmp_path: Path) -> tuple[int, str]:
    """Server-side dry-run apply with strict field validation: unknown fields fail."""
    path = tmp_path / "manifest.yaml"
    path.write_text(manifest)
    result = plane.run_kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-n", NAMESPACE, "-f", str(path),
        check=False,
    )  # fmt: skip
    return result.returncode, result.stdout + result.stderr


def enabled(*objects: str) -> list[str]:
    """helm arguments that turn on the named `metrics.*` objects."""
    return [arg for name in objects for arg in ("--set", f"metrics.{name}.enabled=true")]


def rendered_monitoring_objects(plane: ControlPlane) -> list[dict]:
    rendered = plane.run_helm(
        "template",
        "mcpcache",
        str(CHART),
        "--namespace",
        NAMESPACE,
        *enabled("serviceMonitor", "podMonitor", "prometheusRule"),
    ).stdout
    return [
        doc
        for doc in yaml.safe_load_all(rendered)
        if doc and doc["apiVersion"].startswith("monitoring.coreos.com/")
    ]


def test_chart_monitoring_objects_are_accepted_by_the_real_crds(
    control_plane: ControlPlane, monitoring_crds: list[str], tmp_path: Path
) -> None:
    objects = rendered_monitoring_objects(control_plane)
    kinds = {doc["kind"] for doc in objects}
    assert kinds == {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    code, output = dry_run(control_plane, yaml.safe_dump_all(objects), tmp_path)
    assert code == 0, output
    assert output.count("(server dry run)") == len(objects)


def test_the_crds_do_refuse_a_malformed_object(
    control_plane: ControlPlane, monitoring_crds: list[str], tmp_path: Path
) -> None:
    """The check above means something: a mistake in an object is refused."""
    objects = rendered_monitoring_objects(control_plane)
    monitor = next(doc for doc in objects if doc["kind"] == "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"
    code, output = dry_run(control_plane, yaml.safe_dump(monitor), tmp_path)
    assert code != 0
    assert 'unknown field "spec.endpoints[0].intervall"' in output
    rule = next(doc for doc in objects if doc["kind"] == "PrometheusRule")
    rule["spec"]["groups"][0]["rules"][0]["for"] = "fifteen minutes"
    code, output = dry_run(control_plane, yaml.safe_dump(rule), tmp_path)
    assert code != 0
    assert 'spec.groups[0].rules[0].for: Invalid value: "fifteen minutes"' in output


def test_the_monitoring_pages_podmonitor_for_the_sidecars_is_accepted(
    control_plane: ControlPlane, monitoring_crds: list[str], tmp_path: Path
) -> None:
    blocks = re.findall(
        r"```yaml\n(.*?)```",
        (ROOT / "docs" / "operations" / "monitoring.md").read_text(),
        re.DOTALL,
    )
    podmonitor = next(block for block in blocks if "kind: PodMonitor" in block)
    document = yaml.safe_load(podmonitor)
    document["metadata"]["namespace"] = NAMESPACE
    code, output = dry_run(control_plane, yaml.safe_dump(document), tmp_path)
    assert code == 0, output


def test_chart_lints_clean_with_every_monitoring_object(control_plane: ControlPlane) -> None:
    result = control_plane.run_helm(
        "lint",
        "--strict",
        str(CHART),
        *enabled("serviceMonitor", "podMonitor", "prometheusRule", "grafanaDashboard"),
        "--set",
        "metrics.grafanaDashboard.annotations.grafana_folder=MCP",
    )
    assert "0 chart(s) failed" in result.stdout
