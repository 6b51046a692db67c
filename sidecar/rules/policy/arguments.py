"""What a call's arguments make of its lookup: a `skipIf` value sends it upstream
uncached, the schema's defaults fill what it left out (for the key only), and which
argument names the sidecar reads at all. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...config import Server, ToolRule
from ..reading.arguments import compared
from ..reading.body import Spelling


def read_arguments(
    server: Server, rule: ToolRule | None, tool: str, defaults: Mapping[str, object]
) -> frozenset[str]:
    """The argument names the sidecar reads in a call of `tool`: its rule's `skipIf`
    and `ignoreArguments`, what writes match its entries on, the defaults it fills."""
    names = set(server.cache.matched_arguments(tool)) if server.cache.tools else set()
    names.update(defaults)
    if rule is not None:
        names.update(rule.skip_if)
        names.update(rule.ignore_arguments)
    return frozenset(names)


def skipped(rule: ToolRule, arguments: Mapping[str, Any]) -> bool:
    """Whether one of `rule`'s `skipIf` values is among the call's arguments; a number
    spelt so that no reading settles it counts as one (the call steps aside)."""
    for name, texts in rule.skip_texts.items():
        if name in arguments:
            value = arguments[name]
            text = compared(value)
            if text in texts or (text is None and isinstance(value, Spelling)):
                return True
    return False


def with_defaults(params: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """`params` with each omitted top-level argument that has a known default set to it
    (for the key only: the upstream receives the call as it was sent)."""
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return params
    missing = {name: value for name, value in defaults.items() if name not in arguments}
    if not missing:
        return params
    return {**params, "arguments": {**missing, **arguments}}
