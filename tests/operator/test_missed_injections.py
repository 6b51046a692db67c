"""Pods that missed injection, on the real API server: counted by the operator's gauge,
marked once with a Warning event, listed by `mcpcache check`. A missed pod is made as
the fail-open webhook leaves one: a pod created without the sidecar and labelled for
injection (here the label comes after creation, since the webhook answers)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from kubernetes import client

from peers.operator import render_chart
from peers.paths import CHART
from peers.resources import new_namespace
from peers.serving import wait_until
from peers.site import page, sections

LABEL = {"mcpcache.io/inject": "true"}
GAUGE = "mcpcache_injection_missed_pods"


@pytest.fixture(scope="module")
def core(control_plane) -> client.CoreV1Api:
    return client.CoreV1Api(control_plane.api_client())


def missed_pod(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod:
    body = {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "agent", "image": "agent:1"}]},
    }
    core.create_namespaced_pod(namespace, body, _request_timeout=30)
    return core.patch_namespaced_pod(
        name, namespace, {"metadata": {"labels": LABEL}}, _request_timeout=30
    )


def scans(operator) -> float:
    """How many scans the operator has made (each is one label-selected list of pods)."""
    return operator.sample("mcpcache_operator_api_requests_total", method="GET", resource="pods")


def check(operator, *args: str) -> subprocess.CompletedProcess[str]:
    """`mcpcache check`, as the operator's own service account (its rights suffice)."""
    return subprocess.run(
        [sys.executable, "-m", "mcpcache.sidecar.cli", "check", *args],
        env=os.environ | {"KUBECONFIG": str(operator.kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_pod_that_missed_injection_is_counted_marked_once_and_listed(
    control_plane, core, operator
) -> None:
    namespace = new_namespace(control_plane, "miss")
    asked = {
        "metadata": {"name": "injected", "labels": LABEL},
        "spec": {"containers": [{"name": "agent", "image": "agent:1"}]},
    }
    injected = core.create_namespaced_pod(namespace, asked, _request_timeout=30)
    assert [c.name for c in injected.spec.init_containers] == ["mcpcache"]
    quiet = check(operator, "-n", namespace)
    assert (quiet.returncode, quiet.stdout.split(":")[0]) == (0, "ok"), quiet.stderr

    before = operator.sample(GAUGE)
    pod = missed_pod(core, namespace, "uncached")
    wait_until(lambda: operator.sample(GAUGE) == before + 1, 30, "the missed pod counted")

    def marked() -> list[client.CoreV1Event]:
        events = core.list_namespaced_event(namespace, _request_timeout=30).items
        return [e for e in events if e.reason == "InjectionMissed"]

    wait_until(marked, 30, "the InjectionMissed event")
    seen = scans(operator)
    wait_until(lambda: scans(operator) >= seen + 3, 30, "three more scans")
    (event,) = marked()
    assert (event.type, event.count) == ("Warning", 1)
    assert (event.involved_object.name, event.involved_object.uid) == ("uncached", pod.metadata.uid)
    assert "restart it: delete and create the pod again" in event.message

    listed = check(operator, "-n", namespace)
    assert listed.returncode == 1, listed.stderr
    assert [namespace, "uncached", "-"] in [line.split() for line in listed.stdout.splitlines()]
    assert "injected" not in listed.stdout

    core.delete_namespaced_pod("uncached", namespace, grace_period_seconds=0, _request_timeout=30)
    wait_until(lambda: operator.sample(GAUGE) == before, 30, "the count back down")
    assert check(operator, "-n", namespace).returncode == 0


def test_the_documented_priority_class_is_admitted_and_reaches_the_operators_pods(
    control_plane, core
) -> None:
    """The chart-values page's PriorityClass, applied as written, and a pod of the
    chart's Deployment that names it gets its priority."""
    text = sections(page("reference/chart-values.md"))["The operator"]
    (manifest,) = text.split("```yaml\n")[1:]
    priority_class = yaml.safe_load(manifest.split("```")[0])
    path = control_plane.dir / "priority-class.yaml"
    path.write_text(yaml.safe_dump(priority_class))
    control_plane.run_kubectl("apply", "-f", str(path))
    name = priority_class["metadata"]["name"]
    (deployment,) = render_chart(
        control_plane,
        CHART,
        "prio",
        "deployment.yaml",
        values=(f"operator.priorityClassName={name}",),
    )
    namespace = new_namespace(control_plane, "prio")
    template = deployment["spec"]["template"]
    created = core.create_namespaced_pod(
        namespace,
        {"metadata": {"name": "operator"}, "spec": template["spec"]},
        _request_timeout=30,
    )
    assert created.spec.priority_class_name == name
    assert created.spec.priority == priority_class["value"]
