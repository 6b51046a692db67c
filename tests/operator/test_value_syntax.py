"""Durations and sizes: the CRD and the sidecar's config model accept and refuse the
same values. One table, run through the real API server and through the model."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from mcpcache.sidecar.config import ServerCache
from mcpcache.sidecar.config.units import DURATION_PATTERN, QUANTITY_PATTERN
from peers.paths import CRD
from peers.resources import GROUP, PLURAL, VERSION, mcpserver, new_namespace

DURATIONS = {
    "30s": True,
    "5m": True,
    "1h30m": True,
    "250ms": True,
    "1.5h": True,
    ".5s": True,
    "24h": True,
    "23h59m59s": True,
    "86400s": True,
    "1440m": True,
    "100000000ns": True,
    "0": False,
    "0s": False,
    "24h1s": False,
    "25h": False,
    "86401s": False,
    "10000m": False,
    "999999999999h": False,
    "99999999999999999999ns": False,
    "5 minutes": False,
    " 30s": False,
    "": False,
    "30": False,
    "-5s": False,
    "+5s": False,
    "1d": False,
    "1e3s": False,
    "\u0663\u0660s": False,  # Arabic-Indic digits: Python's \d would take them
}

SIZES: dict[Any, bool] = {
    "64Ki": True,
    "1Mi": True,
    "8Mi": True,
    "1Ti": True,
    "500k": True,
    "1.5Ki": True,
    "1": True,
    "1.5": True,
    1: True,
    65536: True,
    "0": False,
    "0Ki": False,
    "0.5": False,
    0: False,
    -1: False,
    "-1": False,
    "lots": False,
    "1e3": False,
    "64KiB": False,
    "64kb": False,
    "100m": False,
    " 64Ki": False,
    "": False,
}

CASES = [("ttl", v, ok) for v, ok in DURATIONS.items()]
CASES += [("metadataTTL", v, ok) for v, ok in list(DURATIONS.items())[::3]]
CASES += [("staleIfError", v, ok) for v, ok in list(DURATIONS.items())[1::3]]
CASES += [("staleWhileRevalidate", v, ok) for v, ok in list(DURATIONS.items())[2::3]]
CASES += [("maxSize", v, ok) for v, ok in SIZES.items()]


def model_accepts(field: str, value: Any) -> bool:
    try:
        ServerCache.model_validate({field: value})
    except ValidationError:
        return False
    return True


@pytest.fixture(scope="module")
def namespace(control_plane, crd) -> str:
    return new_namespace(control_plane, "syntax")


def api_answer(control_plane, namespace: str, field: str, value: Any) -> tuple[int, str]:
    """The API server's status for a dry-run create with `field` set, and its message."""
    objects = client.CustomObjectsApi(control_plane.api_client())
    body = mcpserver(f"v-{uuid.uuid4().hex[:8]}", **{field: value})
    try:
        objects.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, dry_run="All", _request_timeout=30
        )
    except ApiException as refused:
        return refused.status, str(refused.body)
    return 201, ""


@pytest.mark.parametrize(("field", "value", "valid"), CASES, ids=repr)
def test_the_api_server_and_the_model_agree(control_plane, namespace, field, value, valid) -> None:
    assert model_accepts(field, value) is valid
    status, message = api_answer(control_plane, namespace, field, value)
    if valid:
        assert status == 201, message
    else:
        assert status == 422
        assert f"{field} must be" in message, "refused with a human message"


def test_the_crd_rules_use_the_models_patterns() -> None:
    schema = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    cache = schema["properties"]["spec"]["properties"]["cache"]["properties"]
    for field, pattern in (
        ("ttl", DURATION_PATTERN),
        ("metadataTTL", DURATION_PATTERN),
        ("staleIfError", DURATION_PATTERN),
        ("staleWhileRevalidate", DURATION_PATTERN),
        ("maxSize", QUANTITY_PATTERN),
    ):
        for rule in cache[field]["x-kubernetes-validations"]:
            assert f"'{pattern}'" in rule["rule"], (field, rule["rule"])
