"""The sidecar injected into annotated pods. Pure: a pod in, the changes out.

The sidecar is a native sidecar (an init container with `restartPolicy: Always`), so it
starts before the app containers, stays up beside them, and does not keep a Job's pod
alive. Its servers come from the namespace's ConfigMap, mounted read-only and optional:
pods may start before any MCPServer exists, and the sidecar picks the file up when the
operator writes it. Everything else it is told by its arguments and environment, which
only the pod's author and the operator set.

The container never needs the Kubernetes API, so an empty read-only volume is mounted
over the service-account token's path: whatever mounts the token into the pod's
containers, this one does not see it. It meets the restricted Pod Security Standard.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from mcpcache.sidecar.config import (
    APP_ID_ENV,
    CACHE_MAX_BYTES_ENV,
    CACHE_MAX_ENTRIES_ENV,
    LISTEN_PORT_ENV,
    METRICS_HOST_ENV,
    METRICS_PORT_ENV,
    NAMESPACE_ENV,
    SHARED_CACHE_CLUSTER_NODES_ENV,
    SHARED_CACHE_NAMESPACES_ENV,
    SHARED_CACHE_PASSWORD_ENV,
    SHARED_CACHE_SENTINEL_MASTER_ENV,
    SHARED_CACHE_SENTINEL_NODES_ENV,
    SHARED_CACHE_TIMEOUT_ENV,
    SHARED_CACHE_URL_ENV,
    SHARED_CACHE_USERNAME_ENV,
)
from mcpcache.sidecar.config.tracing import SAMPLE_RATIO_ENV, SERVICE_NAME

from .build import VERSION
from .configmap import CONFIG_KEY, CONFIGMAP_NAME
from .pod_annotations import InjectionRefused, PodChoices, TracingChoice, pod_choices
from .settings import OperatorSettings

__all__ = [
    "APP_ID_ANNOTATION",
    "DIGEST_ANNOTATION",
    "INJECT_ANNOTATION",
    "INJECT_LABEL",
    "SIDECAR_NAME",
    "VERSION_ANNOTATION",
    "InjectionRefused",
    "app_id_of",
    "injected_annotations",
    "plan_injection",
    "sidecar_container",
    "wants_sidecar",
]

INJECT_LABEL: Final = "mcpcache.io/inject"
"""The webhook's objectSelector: only pods labelled so are sent to the operator."""
INJECT_ANNOTATION: Final = "mcpcache.io/inject"
"""The earlier opt-in; honoured on pods that also carry the label."""
APP_ID_ANNOTATION: Final = "mcpcache.io/app-id"
VERSION_ANNOTATION: Final = "mcpcache.io/version"
"""Written on each injected pod: the mcpcache that injected it (and whose image it runs)."""
DIGEST_ANNOTATION: Final = "mcpcache.io/config-digest"
"""Written on each injected pod: a digest of the injected container, which changes with
any setting (image, resources, ports, cache budget, log level) the pod was given."""
SIDECAR_NAME: Final = "mcpcache"
VOLUME_NAME: Final = "mcpcache-config"
NO_TOKEN_VOLUME: Final = "mcpcache-no-token"
TOKEN_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
CONFIG_DIR: Final = "/etc/mcpcache"
URL_ENV: Final = "MCPCACHE_URL"

_APP_ID = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,251}[A-Za-z0-9])?$")


def wants_sidecar(pod: Mapping[str, Any]) -> bool:
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    return "true" in (labels.get(INJECT_LABEL), annotations.get(INJECT_ANNOTATION))


def app_id_of(pod: Mapping[str, Any]) -> str:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    spec = pod.get("spec") or {}
    app_id = annotations.get(APP_ID_ANNOTATION) or spec.get("serviceAccountName") or "default"
    if not _APP_ID.match(app_id):
        raise InjectionRefused(
            f"annotation {APP_ID_ANNOTATION}={app_id!r} is not a valid app id: use letters, "
            "digits, '-', '_' and '.', starting and ending with a letter or digit, "
            "at most 253 characters"
        )
    return str(app_id)


def _sidecar_env(
    app_id: str, settings: OperatorSettings, choices: PodChoices
) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": APP_ID_ENV, "value": app_id},
        # Metrics and probes on the pod IP only: scrapable, not on every interface.
        {"name": METRICS_HOST_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        # Set although they are the defaults: a Service named mcpcache-listen or
        # mcpcache-metrics in the pod's namespace makes the kubelet add a service-link
        # variable of the same name (MCPCACHE_METRICS_PORT=tcp://...), which a
        # container's own variable overrides.
        {"name": LISTEN_PORT_ENV, "value": str(choices.proxy_port)},
        {"name": METRICS_PORT_ENV, "value": str(choices.metrics_port)},
    ]
    if choices.cache_entries is not None:
        env.append({"name": CACHE_MAX_ENTRIES_ENV, "value": str(choices.cache_entries)})
    if choices.cache_bytes is not None:
        env.append({"name": CACHE_MAX_BYTES_ENV, "value": choices.cache_bytes})
    return env + _shared_cache_env(settings) + _tracing_env(choices.tracing)


RESOURCE_FIELDS: Final = (
    ("k8s.pod.name", "OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "metadata.name"),
    ("k8s.pod.uid", "OTEL_RESOURCE_ATTRIBUTES_POD_UID", "metadata.uid"),
    ("k8s.namespace.name", "OTEL_RESOURCE_ATTRIBUTES_NAMESPACE_NAME", "metadata.namespace"),
    ("k8s.node.name", "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "spec.nodeName"),
)
"""The pod's identity on every span: each resource attribute, the variable the downward
API fills, and the pod's field (the variable names are the OpenTelemetry Operator's)."""


def _tracing_env(tracing: TracingChoice | None) -> list[dict[str, Any]]:
    """The standard OpenTelemetry variables, only when the pod's sidecar traces (off:
    the pod is as before). The pod's name is known only once the API server has named
    it (a ReplicaSet's pods are admitted with a generateName), and its node only once
    it is scheduled: the downward API fills them in, and the kubelet expands the
    `$(VAR)` references in `OTEL_RESOURCE_ATTRIBUTES`, which must follow them."""
    if tracing is None:
        return []
    env: list[dict[str, Any]] = [
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": tracing.endpoint},
        {"name": SAMPLE_RATIO_ENV, "value": f"{tracing.sample_ratio:g}"},
        {"name": "OTEL_SERVICE_NAME", "value": SERVICE_NAME},
    ]
    for _, variable, field in RESOURCE_FIELDS:
        env.append({"name": variable, "valueFrom": {"fieldRef": {"fieldPath": field}}})
    attributes = [f"{name}=$({variable})" for name, variable, _ in RESOURCE_FIELDS]
    attributes.append(f"k8s.container.name={SIDECAR_NAME}")
    env.append({"name": "OTEL_RESOURCE_ATTRIBUTES", "value": ",".join(attributes)})
    return env


def _shared_cache_env(settings: OperatorSettings) -> list[dict[str, Any]]:
    """The shared tier's settings, only when one is configured (off: the pod is as before):
    where Redis is (one URL, a cluster's nodes, or sentinels and the primary's name).

    The namespace comes from the pod itself (the downward API): the sidecar prefixes its
    Redis keys with it, and an ACL per namespace confines each to its prefix. The
    credentials come from a Secret in the pod's namespace, optional so that a namespace
    without one still starts (its sidecars then answer from memory and upstream)."""
    env: list[dict[str, Any]] = []
    if url := settings.sidecar_shared_cache_url:
        env.append({"name": SHARED_CACHE_URL_ENV, "value": url})
    elif nodes := settings.sidecar_shared_cache_cluster_nodes:
        env.append({"name": SHARED_CACHE_CLUSTER_NODES_ENV, "value": ",".join(nodes)})
    elif sentinels := settings.sidecar_shared_cache_sentinel_nodes:
        master = settings.sidecar_shared_cache_sentinel_master or ""
        env.append({"name": SHARED_CACHE_SENTINEL_NODES_ENV, "value": ",".join(sentinels)})
        env.append({"name": SHARED_CACHE_SENTINEL_MASTER_ENV, "value": master})
    else:
        return []
    env.append(
        {"name": NAMESPACE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
    )
    if settings.sidecar_shared_cache_timeout:
        env.append(
            {"name": SHARED_CACHE_TIMEOUT_ENV, "value": settings.sidecar_shared_cache_timeout}
        )
    if settings.sidecar_shared_cache_namespaces:
        chosen = ",".join(settings.sidecar_shared_cache_namespaces)
        env.append({"name": SHARED_CACHE_NAMESPACES_ENV, "value": chosen})
    if secret := settings.sidecar_shared_cache_secret:
        for name, key in (
            (SHARED_CACHE_USERNAME_ENV, "username"),
            (SHARED_CACHE_PASSWORD_ENV, "password"),
        ):
            reference = {"name": secret, "key": key, "optional": True}
            env.append({"name": name, "valueFrom": {"secretKeyRef": reference}})
    return env


STARTUP_SECONDS: Final = 60
"""How long the kubelet waits for the sidecar to answer before it restarts it."""


def sidecar_container(
    app_id: str, settings: OperatorSettings, choices: PodChoices
) -> dict[str, Any]:
    """The native sidecar. Its startup probe is what holds the app back: the kubelet
    starts the next container only once a restartable init container's startup probe has
    succeeded, and `/readyz` answers 200 only when both listeners accept connections
    (without it the app started as soon as the sidecar's process did, about 2 s before
    its port answered)."""
    return {
        "name": SIDECAR_NAME,
        "image": settings.sidecar_image,
        "imagePullPolicy": settings.sidecar_image_pull_policy,
        "restartPolicy": "Always",
        "args": [
            "sidecar",
            "--servers-file",
            f"{CONFIG_DIR}/{CONFIG_KEY}",
            "--allow-missing-config",
            "--log-level",
            choices.log_level,
        ],
        "env": _sidecar_env(app_id, settings, choices),
        "ports": [{"name": "mcpcache-prom", "containerPort": choices.metrics_port}],
        "startupProbe": {
            "httpGet": {"path": "/readyz", "port": choices.metrics_port},
            "periodSeconds": 1,
            "failureThreshold": STARTUP_SECONDS,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": choices.metrics_port},
            "periodSeconds": 5,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": choices.metrics_port},
            "periodSeconds": 10,
        },
        "resources": choices.resources,
        "securityContext": {
            "runAsNonRoot": True,
            **_user(settings.sidecar_run_as_user),
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": VOLUME_NAME, "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": NO_TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True},
        ],
    }


def _user(uid: int | None) -> dict[str, int]:
    """The sidecar's user and group, or neither: a platform that assigns uids itself
    (OpenShift's restricted-v2) refuses a container that names one outside its range,
    and runAsNonRoot still holds it to a non-root user."""
    return {} if uid is None else {"runAsUser": uid, "runAsGroup": uid}


def _pull_secrets(spec: Mapping[str, Any], names: tuple[str, ...]) -> list[dict[str, Any]]:
    """The pod's own imagePullSecrets, then the operator's that it lacks: the kubelet
    tries each for every image of the pod, the sidecar's among them."""
    own = [dict(s) for s in spec.get("imagePullSecrets") or []]
    known = {s.get("name") for s in own}
    return own + [{"name": name} for name in names if name not in known]


def plan_injection(pod: Mapping[str, Any], settings: OperatorSettings) -> dict[str, Any] | None:
    """The pod spec's new `initContainers`, `containers` and `volumes` (and
    `imagePullSecrets` when the operator adds any), or None when the sidecar is already
    there (re-admission never injects twice)."""
    spec = pod.get("spec") or {}
    init_containers = list(spec.get("initContainers") or [])
    if any(c.get("name") == SIDECAR_NAME for c in init_containers):
        return None
    if any(c.get("name") == SIDECAR_NAME for c in spec.get("containers") or []):
        raise InjectionRefused(f"a container is already named {SIDECAR_NAME!r}")
    if spec.get("hostNetwork"):
        raise InjectionRefused(
            "the pod uses hostNetwork, so the sidecar's listeners would be on the node's "
            "network; run the agent without hostNetwork, or remove the mcpcache.io/inject label"
        )
    volumes = list(spec.get("volumes") or [])
    for name in (VOLUME_NAME, NO_TOKEN_VOLUME):
        if any(v.get("name") == name for v in volumes):
            raise InjectionRefused(f"a volume is already named {name!r}")
    choices = pod_choices(pod, settings)
    app_id = app_id_of(pod)
    base_url = f"http://localhost:{choices.proxy_port}/mcp"
    containers = []
    for container in spec.get("containers") or []:
        container = copy.deepcopy(container)
        env = list(container.get("env") or [])
        if not any(e.get("name") == URL_ENV for e in env):
            env.append({"name": URL_ENV, "value": base_url})
        container["env"] = env
        containers.append(container)
    plan: dict[str, Any] = {
        "initContainers": [*init_containers, sidecar_container(app_id, settings, choices)],
        "containers": containers,
        "volumes": [
            *volumes,
            {
                "name": VOLUME_NAME,
                "configMap": {"name": CONFIGMAP_NAME, "optional": True},
            },
            {"name": NO_TOKEN_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Ki"}},
        ],
    }
    if settings.injection_image_pull_secrets:
        plan["imagePullSecrets"] = _pull_secrets(spec, settings.injection_image_pull_secrets)
    return plan


def injected_annotations(plan: Mapping[str, Any]) -> dict[str, str]:
    """The annotations an injected pod carries, so that a fleet upgrade can list the pods
    whose sidecar is older than the operator (`kubectl get pods -L mcpcache.io/version`
    does not list annotations; the upgrade page shows the jsonpath that does)."""
    sidecar = next(c for c in plan["initContainers"] if c.get("name") == SIDECAR_NAME)
    canonical = json.dumps(sidecar, sort_keys=True, separators=(",", ":")).encode()
    return {
        VERSION_ANNOTATION: VERSION,
        DIGEST_ANNOTATION: "sha256:" + hashlib.sha256(canonical).hexdigest()[:16],
    }
