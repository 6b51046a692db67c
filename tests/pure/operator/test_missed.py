"""Pods that missed injection, found by what they lack."""

from __future__ import annotations

from typing import Any

from mcpcache.operator.check import report
from mcpcache.operator.missed import MissedPod, event_name, missed_pods

LABELLED = {"mcpcache.io/inject": "true"}


def pod(
    name: str,
    labels: dict[str, str] | None = LABELLED,
    phase: str | None = "Running",
    init: tuple[str, ...] = (),
    **metadata: Any,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "agents", "uid": f"uid-{name}", "labels": labels}
        | metadata,
        "spec": {
            "initContainers": [{"name": n} for n in init],
            "containers": [{"name": "agent"}],
        },
        "status": {"phase": phase},
    }


def test_a_labelled_live_pod_without_the_sidecar_is_missed_and_no_other() -> None:
    pods = [
        pod("uncached"),
        pod("pending", phase="Pending"),
        pod("injected", init=("mcpcache",)),
        pod("not-asked", labels={"app": "agent"}),
        pod("asked-otherwise", labels={"mcpcache.io/inject": "false"}),
        pod("done", phase="Succeeded"),
        pod("failed", phase="Failed"),
        pod("leaving", deletionTimestamp="2026-01-01T00:00:00Z"),
    ]
    assert [p.name for p in missed_pods(pods)] == ["pending", "uncached"]


def test_the_owner_to_restart_is_the_deployment_behind_a_replicaset() -> None:
    from_deployment = pod(
        "agent-7d9c-x2",
        labels=LABELLED | {"pod-template-hash": "7d9c"},
        ownerReferences=[{"kind": "ReplicaSet", "name": "agent-7d9c", "controller": True}],
    )
    from_statefulset = pod(
        "db-0", ownerReferences=[{"kind": "StatefulSet", "name": "db", "controller": True}]
    )
    from_job = pod("job-x", ownerReferences=[{"kind": "Job", "name": "job", "controller": True}])
    bare = pod("bare")
    found = {p.name: p for p in missed_pods([from_deployment, from_statefulset, from_job, bare])}
    assert found["agent-7d9c-x2"].owner == "Deployment/agent"
    assert "kubectl rollout restart deployment agent -n agents" in found["agent-7d9c-x2"].message
    assert "kubectl rollout restart statefulset db -n agents" in found["db-0"].message
    assert "kubectl delete pod job-x -n agents" in found["job-x"].message
    assert found["bare"].owner == ""
    assert "delete and create the pod again" in found["bare"].message
    for missed in found.values():
        assert "once the mcpcache operator is ready" in missed.message.lower()


def test_one_event_name_per_pod_incarnation_within_the_apis_limits() -> None:
    long = MissedPod("agents", "a" * 253, "0123456789abcdef", "")
    assert len(event_name(long)) <= 253
    assert event_name(MissedPod("agents", "p", "11111111-x", "")) != event_name(
        MissedPod("agents", "p", "22222222-x", "")
    )


def test_the_check_command_lists_each_pod_with_its_owner_or_says_all_is_well() -> None:
    assert report([]).startswith("ok: ")
    text = report([MissedPod("agents", "agent-1", "u", "Deployment/agent")])
    lines = text.splitlines()
    assert lines[0].startswith("1 pod(s) labelled mcpcache.io/inject=true run without")
    assert lines[1].split() == ["NAMESPACE", "POD", "OWNER"]
    assert lines[2].split() == ["agents", "agent-1", "Deployment/agent"]
