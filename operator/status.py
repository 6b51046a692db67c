"""An MCPServer's status: what the operator made of it, as conditions."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from mcpcache.sidecar.config import ServerCache, ToolRule
from mcpcache.sidecar.config.units import format_duration, format_quantity

from .resource import ResolvedServer, ceiling_text


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


def _caching(cache: ServerCache, rule: ToolRule) -> str:
    if not cache.enabled or rule.enabled is False or rule.invalidates:
        return "off"
    if rule.enabled or not cache.only_read_only_tools:
        return "on"
    return "read-only"


def effective_tools(cache: ServerCache) -> list[dict[str, Any]]:
    """The tool rules as the sidecars apply them: each rule as the model writes it (so a
    new rule field appears here as it does in the CRD, which derives this item's schema
    from the same model), its `enabled` read with the server's settings as `caching`,
    the server's TTL filled in, and hidden rules named."""
    hidden = {id(rule): earlier.name for rule, earlier in cache.shadowed_rules()}
    rules = []
    for rule in cache.tools:
        written = rule.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        del written["name"]
        written.pop("enabled", None)
        item: dict[str, Any] = {
            "name": rule.name,
            "caching": _caching(cache, rule),
            "ttl": format_duration(rule.ttl if rule.ttl is not None else cache.ttl),
            **written,
        }
        if id(rule) in hidden:
            item["shadowedBy"] = hidden[id(rule)]
        rules.append(item)
    return rules


def desired_status(
    effective: ResolvedServer, generation: int, current: Mapping[str, Any] | None
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
        status["effectiveTimeout"] = format_duration(effective.server.timeout)
        if cache.tools:
            status["effectiveTools"] = effective_tools(cache)
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
        shadowed = bool(effective.shadowed)
        conditions.append(
            _condition(
                "RulesShadowed",
                shadowed,
                "EarlierRuleMatches" if shadowed else "AllRulesReachable",
                "; ".join(
                    f"tool rule {rule!r} never applies: {earlier!r} before it matches first"
                    for rule, earlier in effective.shadowed
                )
                or "every tool rule can apply",
                generation,
                previous.get("RulesShadowed"),
            )
        )
    purge = effective.server.purge if effective.server is not None else None
    if last := purge or (current or {}).get("lastPurge"):
        status["lastPurge"] = last
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


def status_events(
    current: Mapping[str, Any],
    desired: Mapping[str, Any],
    generation: int,
    effective: ResolvedServer,
    namespace: str,
) -> list[tuple[str, str, str]]:
    """The events (type, reason, message) that writing `desired` over `current` calls
    for: a condition newly True for this generation, an invalid spec, a new purge."""

    def newly_true(kind: str) -> Mapping[str, Any] | None:
        was = any(
            c.get("type") == kind
            and c.get("status") == "True"
            and c.get("observedGeneration") == generation
            for c in current.get("conditions", [])
        )
        now = next((c for c in desired["conditions"] if c["type"] == kind), None)
        return now if now is not None and now["status"] == "True" and not was else None

    events = []
    for kind in ("MaxSizeClamped", "RulesShadowed"):
        if (condition := newly_true(kind)) is not None:
            events.append(("Warning", kind, str(condition["message"])))
    if effective.server is None:
        events.append(("Warning", "InvalidSpec", effective.error or "invalid spec"))
    purge = desired.get("lastPurge")
    if purge is not None and purge != current.get("lastPurge"):
        events.append(
            (
                "Normal",
                "PurgePropagated",
                f"purge {purge!r} written to the sidecar configuration of namespace "
                f"{namespace}: sidecars drop this server's entries as they reload it",
            )
        )
    return events
