"""A real `410 Gone`: etcd's history compacted while the operator could not watch,
so its watches cannot resume and kopf lists again. What was deleted meanwhile (an
event no watch will ever deliver) must still leave the ConfigMap."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from peers.binaries import go_built
from peers.controlplane import BIN_ENV, Authority, ControlPlane
from peers.cutoff import CutOff, through
from peers.operator import OPERATOR_NAMESPACE, OperatorProcess, install_operator_rbac
from peers.paths import CHART, CRD
from peers.resources import GROUP, PLURAL, VERSION, configured_servers, mcpserver, new_namespace
from peers.serving import wait_until

BUILD = Path(__file__).parents[1] / "controlplane" / "build.sh"


@pytest.fixture(scope="module")
def uncached_plane() -> Iterator[ControlPlane]:
    """A control plane of its own whose API server keeps no watch cache, so that a
    watch resumes from etcd itself, which answers `410 Gone` for a compacted version
    (the cache would answer from its own window, whatever etcd has compacted)."""
    bin_dir = go_built(BIN_ENV, BUILD, "the test control plane")
    plane = ControlPlane(bin_dir, ("--watch-cache=false",)).start()
    try:
        plane.run_kubectl("apply", "-f", str(CRD))
        plane.run_kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", "crd/mcpservers.mcpcache.io"
        )
        plane.run_kubectl("create", "namespace", OPERATOR_NAMESPACE)
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def operator_behind_proxy(uncached_plane) -> Iterator[tuple[OperatorProcess, CutOff]]:
    kubeconfig = install_operator_rbac(uncached_plane, CHART, OPERATOR_NAMESPACE)
    proxy = CutOff("127.0.0.1", uncached_plane.port)
    process = OperatorProcess(through(kubeconfig, proxy), Authority.create("relist-webhook-ca"))
    try:
        process.start()
        wait_until(process.leading, 30, "the operator to take the lease")
        yield process, proxy
    finally:
        process.stop()
        proxy.close()


def test_after_a_410_the_operator_lists_again_and_forgets_what_was_deleted_unseen(
    uncached_plane, operator_behind_proxy
) -> None:
    operator, proxy = operator_behind_proxy
    core = client.CoreV1Api(uncached_plane.api_client())
    objects = client.CustomObjectsApi(uncached_plane.api_client())
    namespace = new_namespace(uncached_plane, "gone")
    for name in ("stays", "goes"):
        objects.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, mcpserver(name), _request_timeout=30
        )
    wait_until(
        lambda: set(configured_servers(core, namespace) or {}) == {"stays", "goes"},
        30,
        "the first pass",
    )
    relists = operator.sample("mcpcache_operator_relists_total") or 0

    proxy.cut()
    objects.delete_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "goes", _request_timeout=30
    )
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("comes"), _request_timeout=30
    )
    uncached_plane.compact_etcd()
    proxy.mend()  # every watch's connection ends; each resumes from a compacted version

    wait_until(
        lambda: set(configured_servers(core, namespace) or {}) == {"stays", "comes"},
        60,
        "the ConfigMap to lose the server deleted unseen",
    )
    assert (operator.sample("mcpcache_operator_relists_total") or 0) > relists
    assert operator.process is not None
    assert operator.process.poll() is None
