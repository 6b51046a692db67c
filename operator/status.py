"""An MCPServer's status: what the operator made of it, as conditions."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from mcpcache.sidecar.units import format_duration, format_quantity

from .resource import Effective, ceiling_text


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(
    kind: str,
    ok: bool,
    reason: str,
    message: str,
    generation: int,
    previous: Mapping[str, Any] | None,
) -> dict[str, Any]:
    status = "True" if ok else "False"
    changed = previous is None or previous.get("status") != status
    since = _now() if changed or not previous else previous.get("lastTransitionTime", _now())
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": since,
    }


def desired_status(
    effective: Effective, generation: int, current: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The status to write, keeping transition times of conditions that did not flip."""
    previous = {c.get("type"): c for c in (current or {}).get("conditions", [])}
    conditions: list[dict[str, Any]] = []
    status: dict[str, Any] = {"observedGeneration": generation}
    if effective.server is None:
        conditions.append(
            _condition(
                "Ready",
                False,
                "InvalidSpec",
                effective.error or "invalid spec",
                generation,
                previous.get("Ready"),
            )
        )
    else:
        cache = effective.server.cache
        status["effectiveTTL"] = format_duration(cache.ttl)
        status["effectiveMaxSize"] = format_quantity(cache.max_size)
        conditions.append(
            _condition(
                "Ready",
                True,
                "Configured",
                "written to the namespace's sidecar configuration"
                + ("" if cache.enabled else " (caching disabled)"),
                generation,
                previous.get("Ready"),
            )
        )
        clamped = effective.clamped_from is not None
        conditions.append(
            _condition(
                "MaxSizeClamped",
                clamped,
                "AboveCeiling" if clamped else "WithinCeiling",
                f"maxSize {effective.clamped_from} is above the {ceiling_text()} ceiling; "
                f"{ceiling_text()} applies"
                if clamped
                else f"maxSize is within the {ceiling_text()} ceiling",
                generation,
                previous.get("MaxSizeClamped"),
            )
        )
    status["conditions"] = conditions
    return status


def same_status(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> bool:
    """Equal apart from transition times (which only change with the status)."""

    def strip(status: Mapping[str, Any] | None) -> Any:
        if not status:
            return None
        conditions = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in status.get("conditions", [])
        ]
        return {**status, "conditions": conditions}

    return bool(strip(a) == strip(b))
