from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from kubernetes import client
from peers.controlplane import Authority, ControlPlane
from peers.operator import OperatorProcess, install_operator_rbac
from peers.paths import CHART, CRD
from peers.serving import wait_until

OPERATOR_NAMESPACE = "mcpcache-system"
TEST_LABEL = "mcpcache-test"


@pytest.fixture(scope="session")
def crd(control_plane: ControlPlane) -> None:
    control_plane.run_kubectl("apply", "-f", str(CRD))
    extensions = client.ApiextensionsV1Api(control_plane.api_client())

    def established() -> bool:
        crd = extensions.read_custom_resource_definition("mcpservers.mcpcache.io")
        return any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )

    wait_until(established, 30, "the MCPServer CRD")


@pytest.fixture(scope="session")
def webhook_ca() -> Authority:
    return Authority.create("mcpcache-webhook-ca")


@pytest.fixture(scope="session")
def operator(
    control_plane: ControlPlane, crd: None, webhook_ca: Authority
) -> Iterator[OperatorProcess]:
    """The operator, running as its service account with only the chart's RBAC."""
    core = client.CoreV1Api(control_plane.api_client())
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=OPERATOR_NAMESPACE)))
    kubeconfig = install_operator_rbac(control_plane, CHART, OPERATOR_NAMESPACE)
    process = OperatorProcess(kubeconfig, webhook_ca).start()
    admission = client.AdmissionregistrationV1Api(control_plane.api_client())
    admission.create_mutating_webhook_configuration(
        {
            "metadata": {"name": "mcpcache-test-inject"},
            "webhooks": [
                {
                    "name": "inject.mcpcache.io",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 10,
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{process.webhook_port}/inject-sidecar",
                        "caBundle": base64.b64encode(webhook_ca.pem).decode(),
                    },
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {TEST_LABEL: "true"}},
                }
            ],
        }
    )
    try:
        yield process
    finally:
        admission.delete_mutating_webhook_configuration("mcpcache-test-inject")
        process.stop()
