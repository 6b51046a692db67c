"""The upgrade page's commands, exactly as written, on an API server of their own: a
release of an earlier chart is upgraded to this one with its MCPServers kept, then
uninstalled as the page says. The commands are read from the pages, so the test fails
when a page's commands stop working."""

from __future__ import annotations

import io
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from peers.binaries import go_built
from peers.controlplane import BIN_ENV, ControlPlane
from peers.paths import CHART, ROOT
from peers.resources import GROUP, PLURAL, VERSION, mcpserver
from peers.serving import wait_until
from peers.site import page, sections

PREVIOUS = "d8a1c53^"
"""An earlier release of the chart: before `tests.namespace` existed (which made
`--reuse-values` fail with a nil pointer) and with an older CRD (which made the CRD
step stop on a field-manager conflict)."""
RELEASE, NAMESPACE = "mcpcache", "mcpcache-system"
BUILD = ROOT / "tests" / "controlplane" / "build.sh"


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.DOTALL)


def commands(block: str) -> list[str]:
    """The block's commands: continued lines joined, comments and blank lines left out."""
    joined = re.sub(r"\\\n\s*", "", block)
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def upgrade_plane() -> Iterator[ControlPlane]:
    """An API server of its own: the page installs the chart under its documented
    release name and namespace, and deletes the CRD at the end."""
    plane = ControlPlane(go_built(BIN_ENV, BUILD, "the test control plane")).start()
    try:
        yield plane
    finally:
        plane.stop()


def checkout(where: Path, commit: str | None) -> Path:
    """A folder whose charts/mcpcache is the chart at `commit` (None: this one), where
    the pages' relative paths (`charts/mcpcache/crds/`) resolve."""
    where.mkdir()
    if commit is None:
        (where / "charts").mkdir()
        (where / "charts" / "mcpcache").symlink_to(CHART)
        return where
    archived = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "charts/mcpcache"],
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archived)) as archive:
        archive.extractall(where, filter="data")
    return where


def shell(
    plane: ControlPlane, command: str, cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """One command of a page, by bash, with the suite's kubectl and helm first on PATH."""
    env = os.environ | {
        "PATH": f"{plane.bin_dir}:{os.environ['PATH']}",
        "KUBECONFIG": str(plane.kubeconfig),
        "HELM_CACHE_HOME": str(plane.dir / "helm-cache"),
        "HELM_CONFIG_HOME": str(plane.dir / "helm-config"),
        "HELM_DATA_HOME": str(plane.dir / "helm-data"),
    }
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run(plane: ControlPlane, command: str, cwd: Path, timeout: float = 120) -> str:
    done = shell(plane, command, cwd, timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_upgrade_page_takes_an_earlier_release_to_this_chart_and_uninstalls_it(
    upgrade_plane: ControlPlane, tmp_path: Path
) -> None:
    plane = upgrade_plane
    old, new = checkout(tmp_path / "old", PREVIOUS), checkout(tmp_path / "new", None)
    api = plane.api_client()
    objects = client.CustomObjectsApi(api)
    extensions = client.ApiextensionsV1Api(api)

    (block,) = bash_blocks(sections(page("guide/kubernetes.md"))["2. Install the chart"])
    (install,) = commands(block)
    assert install.startswith("helm install mcpcache charts/mcpcache -n mcpcache-system")
    run(plane, install, old)
    wait_until(
        lambda: any(
            c.type == "Established" and c.status == "True"
            for c in extensions.read_custom_resource_definition(
                "mcpservers.mcpcache.io"
            ).status.conditions
            or []
        ),
        30,
        "the earlier chart's CRD",
    )
    plane.run_kubectl("create", "namespace", "agents")
    created = objects.create_namespaced_custom_object(
        GROUP, VERSION, "agents", PLURAL, mcpserver("docs"), _request_timeout=30
    )

    steps = sections(page("operations/upgrade-uninstall.md"))
    (upgrade,) = bash_blocks(steps["Upgrade"])
    uninstall, cleanup = bash_blocks(steps["Uninstall"])
    crd_step, helm_step = commands(upgrade)
    # What the page's flags are for: without them, both steps fail from this release.
    conflict = shell(plane, crd_step.replace(" --force-conflicts", ""), new)
    assert conflict.returncode != 0
    assert "conflict" in conflict.stderr.lower(), conflict.stderr
    reused = helm_step.replace("--reset-then-reuse-values", "--reuse-values") + " --dry-run"
    refused = shell(plane, reused, new)
    assert refused.returncode != 0, "the previous chart's defaults lack this chart's values"
    assert "nil pointer" in refused.stderr, refused.stderr

    for command in commands(upgrade):
        run(plane, command, new)

    crd = extensions.read_custom_resource_definition("mcpservers.mcpcache.io")
    stored = api.sanitize_for_serialization(crd.spec.versions[0].schema)
    written = yaml.safe_load((CHART / "crds" / "mcpservers.mcpcache.io.yaml").read_text())
    assert stored == written["spec"]["versions"][0]["schema"], "this chart's CRD is in force"
    owners = {(f.manager, f.operation) for f in crd.metadata.managed_fields}
    assert ("kubectl", "Apply") in owners, owners
    history = run(plane, f"helm history {RELEASE} -n {NAMESPACE} -o yaml", new)
    last = yaml.safe_load(history)[-1]
    assert (last["revision"], last["status"]) == (2, "deployed")
    values = yaml.safe_load(run(plane, f"helm get values {RELEASE} -n {NAMESPACE} -o yaml", new))
    assert values["image"] == {"repository": "registry.example.com/mcpcache", "tag": "0.1.1"}
    deployment = client.AppsV1Api(api).read_namespaced_deployment(f"{RELEASE}-operator", NAMESPACE)
    (container,) = deployment.spec.template.spec.containers
    assert container.image == "registry.example.com/mcpcache:0.1.1"
    assert deployment.spec.template.spec.security_context.run_as_user == 65532
    kept = objects.get_namespaced_custom_object(
        GROUP, VERSION, "agents", PLURAL, "docs", _request_timeout=30
    )
    assert kept["metadata"]["uid"] == created["metadata"]["uid"]
    assert kept["spec"]["endpoint"] == created["spec"]["endpoint"]

    (helm_uninstall,) = commands(uninstall)
    run(plane, helm_uninstall, new)
    kept = objects.get_namespaced_custom_object(
        GROUP, VERSION, "agents", PLURAL, "docs", _request_timeout=30
    )
    assert kept["metadata"]["uid"] == created["metadata"]["uid"], "MCPServers outlive the release"
    *removals, delete_namespace = commands(cleanup)
    for command in removals:
        run(plane, command, new)
    with pytest.raises(ApiException) as gone:
        extensions.read_custom_resource_definition("mcpservers.mcpcache.io")
    assert gone.value.status == 404
    # No namespace controller runs beside the suite's API server, so the namespace stays
    # Terminating and `kubectl delete` would wait for it: the deletion is what is checked.
    assert delete_namespace == f"kubectl delete namespace {NAMESPACE}"
    with pytest.raises(subprocess.TimeoutExpired):
        run(plane, delete_namespace, new, timeout=10)
    core = client.CoreV1Api(api)
    assert core.read_namespace(NAMESPACE).status.phase == "Terminating"
