"""Pods that asked for the sidecar and run without it. Pure: pods in, the missed ones out.

The webhook fails open (`failurePolicy: Ignore`): while no operator replica answers, a
labelled pod is admitted as it is, and nothing at admission marks it. Such a pod is
found afterwards by what it lacks: it carries the webhook's label and no container
named as the sidecar. Istio's `istioctl analyze` (IST0103) and `linkerd check --proxy`
find their own the same way. Only a restart brings the sidecar: the webhook sees pods
as they are created, never later.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .injection import INJECT_LABEL, SIDECAR_NAME

__all__ = ["LABEL_SELECTOR", "REASON", "MissedPod", "event_name", "missed_pods"]

LABEL_SELECTOR: Final = f"{INJECT_LABEL}=true"
"""What the scan lists: the pods the webhook's objectSelector would have sent to it."""
REASON: Final = "InjectionMissed"
"""The Warning event's reason on each such pod."""
_LIVE_PHASES: Final = frozenset({"Pending", "Running", "Unknown", None})


@dataclass(frozen=True)
class MissedPod:
    namespace: str
    name: str
    uid: str
    owner: str
    """`kind/name` of its controller (what to restart), or empty for a bare pod."""

    @property
    def message(self) -> str:
        """The event's text, saying how to fix it."""
        if self.owner:
            kind, name = self.owner.split("/", 1)
            restart = (
                f"kubectl rollout restart {kind.lower()} {name} -n {self.namespace}"
                if kind in ("Deployment", "StatefulSet", "DaemonSet")
                else f"kubectl delete pod {self.name} -n {self.namespace} (its {self.owner} "
                "creates it again)"
            )
        else:
            restart = "delete and create the pod again"
        return (
            f"This pod is labelled {LABEL_SELECTOR} but runs without the mcpcache sidecar: "
            "the injection webhook did not answer when it was created (it fails open). "
            f"Once the mcpcache operator is ready, restart it: {restart}."
        )


def _owner(pod: Mapping[str, Any]) -> str:
    """The controller to restart: a ReplicaSet's pods are restarted through its
    Deployment, which the pod does not name; the ReplicaSet's name is the Deployment's
    and a hash, the ReplicaSet's `pod-template-hash` label."""
    metadata = pod.get("metadata") or {}
    for reference in metadata.get("ownerReferences") or []:
        if not reference.get("controller"):
            continue
        kind, name = str(reference.get("kind")), str(reference.get("name"))
        template_hash = (metadata.get("labels") or {}).get("pod-template-hash")
        if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
            return f"Deployment/{name.removesuffix(f'-{template_hash}')}"
        return f"{kind}/{name}"
    return ""


def missed_pods(pods: Iterable[Mapping[str, Any]]) -> list[MissedPod]:
    """The live pods among `pods` (listed by `LABEL_SELECTOR`) with no sidecar container.
    A pod being deleted, or finished, is not counted: it will not run again as it is."""
    found = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        labels = metadata.get("labels") or {}
        if labels.get(INJECT_LABEL) != "true" or metadata.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") not in _LIVE_PHASES:
            continue
        containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        if any(c.get("name") == SIDECAR_NAME for c in containers):
            continue
        found.append(
            MissedPod(
                namespace=str(metadata.get("namespace")),
                name=str(metadata.get("name")),
                uid=str(metadata.get("uid") or ""),
                owner=_owner(pod),
            )
        )
    return sorted(found, key=lambda p: (p.namespace, p.name))


def event_name(pod: MissedPod) -> str:
    """One name per pod (and per incarnation: its uid), so that however many replicas
    find it, and however often, the API server keeps one Event: a second create is
    refused as a conflict. After the Event expires (an hour by default) it is posted
    again while the pod still lacks the sidecar."""
    return f"{pod.name[:200]}.mcpcache-missed-{pod.uid[:8]}"
