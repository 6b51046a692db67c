"""What the sidecar has learned of each server's tools from the `tools/list` answers
passing through it (their annotations and schema defaults): which ones the server
declares read-only (`readOnlyHint`), which it declares as writers (`readOnlyHint:
false`, `destructiveHint: true`: never cached unless a rule names them), and the
defaults of their arguments (for `fillSchemaDefaults`).

Pure, no I/O. Under `onlyReadOnlyTools` a tool is cached only once some listing has
called it read-only and none has said otherwise: callers may be shown different lists,
and a tool one of them sees as a write must not be cached for anyone. What a server said
is forgotten when it announces that its tools changed.

Defaults are learned per caller (the digest of who asked for the listing, as the key
sees them) and fill only that caller's own calls: a schema may name one caller's own
choices (an owner that defaults to the logged-in user), so Alice's listing says nothing
of what Bob's omitted argument means. A tool's defaults are used only while every
listing that caller was shown gives the same certain defaults (`certain_defaults`); two
that differ (a server that changed without saying so) leave the tool with no defaults
until the server announces a change. The callers remembered per server are bounded; one
forgotten has no defaults (no sharing) until it lists the tools again.

A listing's defaults hold only as long as the listing may be cached (its `ttlMs`, the
server's `metadataTTL`, else its `ttl`; see `listing_ttl`): then they are learned again
from the next listing, and a call is not filled meanwhile. A call filled from defaults
reads the entry of the call that names them, but its own answer is filed apart
(`policy.plan`): the server may have changed the default since, and a caller who names
the old value must never read an answer made under the new one.

Only the top-level argument defaults of a tool's `inputSchema` that can be read with
certainty are learned (`certain_defaults`). An omitted argument and its explicit default
share an entry only if the server surely fills that default itself. JSON Schema has many
ways to make a `default` conditional or to put one somewhere else; each of them here
means "not certain", and an argument without a certain default is keyed as sent (no
sharing):

- the schema as a whole: not an object with plain `properties`, or any keyword that can
  add to or change them (`$ref`, `allOf`/`anyOf`/`oneOf`/`not`, `if`/`then`/`else`,
  `dependentSchemas`, `patternProperties`, `unevaluatedProperties`, and anything not
  in the short list below): no defaults at all;
- one property: a `$ref` or a combinator anywhere in it, a `default` of another JSON
  type than its `type` says or outside its `enum`/`const`, or the property `required`
  (a default the caller can never omit is a contradiction): that property's default
  is not used.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

import cachetools
import orjson

MAX_TOOLS_PER_SERVER: Final = 10_000
"""Beyond this many names a server's further tools are not remembered (so not cached)."""

MAX_CALLERS_PER_SERVER: Final = 256
"""The callers whose listings' defaults are kept per server, the least recent dropped."""


_NO_CALLERS: Final[dict[str, Any]] = {}
_NO_WRITERS: Final[frozenset[str]] = frozenset()
_UNCERTAIN: Final[Mapping[str, Any]] = {}
"""A tool whose listings disagree: no defaults (compared by identity, not by value)."""


class Learned(NamedTuple):
    """The defaults one caller's listings gave, until when they hold."""

    until: float
    tools: dict[str, Mapping[str, Any]]


class LearnedTools:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._read_only: dict[str, dict[str, bool]] = {}
        self._writers: dict[str, set[str]] = {}
        self._defaults: dict[str, cachetools.LRUCache[str, Learned]] = {}

    def defaults(self, server: str, caller: str, tool: str) -> Mapping[str, Any]:
        """The certain argument defaults of `tool` in the listings `caller` was shown
        ({} when unknown, in doubt, or older than the listing may be cached)."""
        learned = self._learned(server, caller)
        return learned.tools.get(tool, _UNCERTAIN) if learned is not None else _UNCERTAIN

    def knows(self, server: str, caller: str) -> bool:
        """Whether some listing `caller` was shown is on record, and still holds, since
        the server's tools were last forgotten."""
        return self._learned(server, caller) is not None

    def _learned(self, server: str, caller: str) -> Learned | None:
        learned = self._defaults.get(server, _NO_CALLERS).get(caller)
        if learned is None or learned.until <= self._clock():
            return None
        return learned

    def declared_writer(self, server: str, tool: str) -> bool:
        """Whether some listing marked `tool` as one that changes things
        (`readOnlyHint: false` or `destructiveHint: true`), since the server's tools were
        last forgotten. A server's hints may only make caching more careful: a listing
        that calls the tool read-only later does not take the mark back."""
        return tool in self._writers.get(server, _NO_WRITERS)

    def read_only(self, server: str, tool: str) -> bool:
        return self._read_only.get(server, {}).get(tool, False)

    def learn(self, server: str, result: Any, caller: str, ttl: float = math.inf) -> int:
        """Take in one `tools/list` result that `caller` (a digest) was shown, whose
        defaults hold for `ttl` seconds (as long as the listing may be cached: a server
        may change a default without announcing it, a stateless redeploy say); returns
        how many tools it described."""
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return 0
        self._learn_defaults(server, caller, tools, ttl)
        known = self._read_only.setdefault(server, {})
        seen = 0
        for tool in tools:
            if not isinstance(tool, dict) or not isinstance(name := tool.get("name"), str):
                continue
            annotations = tool.get("annotations")
            read_only = isinstance(annotations, dict) and annotations.get("readOnlyHint") is True
            if isinstance(annotations, dict) and (
                annotations.get("readOnlyHint") is False
                or annotations.get("destructiveHint") is True
            ):
                writers = self._writers.setdefault(server, set())
                if len(writers) < MAX_TOOLS_PER_SERVER:
                    writers.add(name)
            if name in known:
                known[name] = known[name] and read_only
            elif len(known) < MAX_TOOLS_PER_SERVER:
                known[name] = read_only
            seen += 1
        return seen

    def _learn_defaults(self, server: str, caller: str, tools: list[Any], ttl: float) -> None:
        callers = self._defaults.get(server)
        if callers is None:
            callers = self._defaults[server] = cachetools.LRUCache(MAX_CALLERS_PER_SERVER)
        now = self._clock()
        learned = callers.get(caller)
        if learned is None or learned.until <= now:  # learned anew once it lapsed
            learned = Learned(now + ttl, {})
        else:  # the earliest end of the listings that agree stands
            learned = Learned(min(learned.until, now + ttl), learned.tools)
        callers[caller] = learned
        known = learned.tools
        for tool in tools:
            if not isinstance(tool, dict) or not isinstance(name := tool.get("name"), str):
                continue
            found = certain_defaults(tool.get("inputSchema"))
            if name in known:
                if known[name] is not _UNCERTAIN and _json(known[name]) != _json(found):
                    known[name] = _UNCERTAIN
            elif len(known) < MAX_TOOLS_PER_SERVER:
                known[name] = found or _UNCERTAIN

    def forget(self, server: str) -> None:
        self._read_only.pop(server, None)
        self._writers.pop(server, None)
        self._defaults.pop(server, None)


def _json(value: Mapping[str, Any]) -> bytes:
    """Exact comparison: Python's `==` holds `1`, `1.0` and `True` equal; JSON does not."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def listing_ttl(result: Any, metadata_ttl: float | None, ttl: float) -> float:
    """How long a listing's defaults hold: its positive `ttlMs`, else the server's
    `metadataTTL`, else its `ttl`."""
    ttl_ms = result.get("ttlMs") if isinstance(result, dict) else None
    if isinstance(ttl_ms, int | float) and not isinstance(ttl_ms, bool) and ttl_ms > 0:
        return float(ttl_ms) / 1000
    return metadata_ttl or ttl


_SCHEMA_KEYWORDS: Final = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "title",
        "description",
        "$schema",
        "$id",
        "$comment",
        "$defs",
        "definitions",
        "examples",
    }
)
"""Top-level keywords that change no property's default (`$defs` is only reachable by a
`$ref`, which makes the property that uses it uncertain)."""
_UNCERTAIN_IN_PROPERTY: Final = frozenset(
    {
        "$ref",
        "$dynamicRef",
        "$recursiveRef",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "dependentSchemas",
    }
)
_JSON_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}
MAX_DEFAULTS: Final = 64


def certain_defaults(schema: Any) -> dict[str, Any]:
    """The defaults of `schema`'s top-level properties that are certain (see module)."""
    if not isinstance(schema, dict) or not _SCHEMA_KEYWORDS.issuperset(schema):
        return {}
    if schema.get("type", "object") != "object":
        return {}
    properties = schema.get("properties")
    required = schema.get("required", [])
    if not isinstance(properties, dict) or not isinstance(required, list):
        return {}
    found: dict[str, Any] = {}
    for name, prop in properties.items():
        if len(found) >= MAX_DEFAULTS:
            break
        certain = isinstance(prop, dict) and "default" in prop and name not in required
        if certain and _certain(prop):
            found[name] = prop["default"]
    return found


def _certain(prop: Mapping[str, Any]) -> bool:
    if _mentions_uncertain(prop):
        return False
    default = prop["default"]
    kind = prop.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        allowed = tuple(t for k in kinds for t in _JSON_TYPES.get(str(k), ()))
        if not isinstance(default, allowed):
            return False
        if isinstance(default, bool) and "boolean" not in kinds:
            return False  # a bool is an int to Python, never to JSON Schema
    if "enum" in prop and (not isinstance(prop["enum"], list) or default not in prop["enum"]):
        return False
    return "const" not in prop or prop["const"] == default


def _mentions_uncertain(value: Any, depth: int = 0) -> bool:
    """Whether a `$ref` or a combinator appears anywhere in `value` (deeply nested
    schemas count as uncertain too)."""
    if depth > 16:
        return True
    if isinstance(value, dict):
        if not _UNCERTAIN_IN_PROPERTY.isdisjoint(value):
            return True
        return any(_mentions_uncertain(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_mentions_uncertain(v, depth + 1) for v in value)
    return False
