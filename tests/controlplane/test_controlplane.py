"""The test control plane itself: a real API server that the operator tests can trust."""

from __future__ import annotations

import json
import queue
import threading
import uuid
from pathlib import Path

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from peers.serving import wait_until


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def core(control_plane) -> client.CoreV1Api:
    return client.CoreV1Api(control_plane.api_client())


def test_namespaces_and_configmaps_are_stored_and_watched(control_plane, core) -> None:
    namespace = unique("smoke")
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    events: queue.Queue[tuple[str, dict[str, str]]] = queue.Queue()
    stream = watch.Watch()
    # Watch from the list's resourceVersion: every later change is delivered, however
    # late the watch connects.
    since = core.list_namespaced_config_map(namespace).metadata.resource_version

    def follow() -> None:
        changes = stream.stream(
            core.list_namespaced_config_map, namespace, resource_version=since, timeout_seconds=30
        )
        for event in changes:
            if event["object"].metadata.name == "settings":
                events.put((event["type"], dict(event["object"].data or {})))
            if event["type"] == "DELETED":
                stream.stop()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings"), data={"a": "1"})
    core.create_namespaced_config_map(namespace, body)
    core.patch_namespaced_config_map("settings", namespace, {"data": {"a": "2"}})
    core.delete_namespaced_config_map("settings", namespace)
    seen = [events.get(timeout=20) for _ in range(3)]
    thread.join(20)
    assert seen == [("ADDED", {"a": "1"}), ("MODIFIED", {"a": "2"}), ("DELETED", {"a": "2"})]


def test_a_custom_resource_definition_is_served(control_plane) -> None:
    api = control_plane.api_client()
    extensions = client.ApiextensionsV1Api(api)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.smoke.example"},
        "spec": {
            "group": "smoke.example",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer", "minimum": 1}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    extensions.create_custom_resource_definition(crd)

    def established() -> bool:
        status = extensions.read_custom_resource_definition("widgets.smoke.example").status
        return any(c.type == "Established" and c.status == "True" for c in status.conditions or [])

    wait_until(established, 30, "the CRD to be established")
    objects = client.CustomObjectsApi(api)
    widget = {"apiVersion": "smoke.example/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 3}}
    objects.create_namespaced_custom_object("smoke.example", "v1", "default", "widgets", widget)
    bad = {**widget, "metadata": {"name": "bad"}, "spec": {"size": 0}}
    with pytest.raises(ApiException) as refused:
        objects.create_namespaced_custom_object("smoke.example", "v1", "default", "widgets", bad)
    assert refused.value.status == 422
    assert "spec.size" in refused.value.body


def test_kubectl_works_against_it(control_plane, core) -> None:
    core.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="for-kubectl"), data={"k": "v"})
    )
    out = control_plane.run_kubectl("get", "configmap", "for-kubectl", "-n", "default", "-o", "json")
    assert json.loads(out.stdout)["data"] == {"k": "v"}
    version = json.loads(control_plane.run_kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"].startswith("v1.")
    assert version["serverVersion"]["gitVersion"] == version["clientVersion"]["gitVersion"]


def test_helm_templates_and_installs_a_chart(control_plane, tmp_path: Path) -> None:
    chart = tmp_path / "smoke"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: smoke\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("greeting: hello\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\n"
        "data:\n  greeting: {{ .Values.greeting | quote }}\n"
    )
    rendered = control_plane.run_helm("template", "demo", str(chart), "--set", "greeting=hi")
    assert "name: demo-cm" in rendered.stdout
    assert 'greeting: "hi"' in rendered.stdout
    control_plane.run_helm("install", "demo", str(chart), "--namespace", "default", "--wait")
    core = client.CoreV1Api(control_plane.api_client())
    assert core.read_namespaced_config_map("demo-cm", "default").data == {"greeting": "hello"}
    control_plane.run_helm("uninstall", "demo", "--namespace", "default", "--wait")
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map("demo-cm", "default")
    assert gone.value.status == 404


def test_rbac_denies_a_service_account_until_it_is_bound(control_plane, core) -> None:
    namespace = unique("rbac")
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="robot")))
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "robot")
    as_robot = client.CoreV1Api(control_plane.api_client(kubeconfig))
    with pytest.raises(ApiException) as denied:
        as_robot.list_namespaced_config_map(namespace)
    assert denied.value.status == 403
    assert f"system:serviceaccount:{namespace}:robot" in denied.value.body

    rbac = client.RbacAuthorizationV1Api(control_plane.api_client())
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "read-configmaps"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "robot-reads"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-configmaps"},
            "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": namespace}],
        },
    )
    assert wait_until(lambda: _allowed(as_robot, namespace), 10, "the binding to apply")
    denied_elsewhere = control_plane.run_kubectl(
        "get", "secrets", "-n", namespace, kubeconfig=kubeconfig, check=False
    )
    assert denied_elsewhere.returncode != 0
    assert "forbidden" in denied_elsewhere.stderr


def _allowed(api: client.CoreV1Api, namespace: str) -> bool:
    try:
        api.list_namespaced_config_map(namespace)
        return True
    except ApiException:
        return False
