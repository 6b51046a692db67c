"""One upstream server's settings: its address, its cache block and its tool rules."""

from __future__ import annotations

import fnmatch
import functools
import re
from typing import Annotated, Any, Self
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    model_validator,
)

from .fields import (
    ALWAYS_KEYED_HEADERS,
    DEFAULT_IDENTITY_HEADERS,
    DEFAULT_MAX_SIZE,
    DEFAULT_TTL_SECONDS,
    MAX_IGNORED_HEADERS,
    MAX_SIZE_CEILING,
    MAX_TOOL_RULES,
    MAX_TTL_SECONDS,
    SERVER_DEFAULT,
    Duration,
    Model,
    Quantity,
    SchemaHint,
)
from .tools import ArgumentMatch, ToolRule

_RULE_MEMO_LIMIT = 4096


def _header_names(names: tuple[str, ...]) -> tuple[str, ...]:
    lowered = tuple(dict.fromkeys(name.lower() for name in names))
    for name in lowered:
        if not _TOKEN.fullmatch(name):
            raise ValueError(f"{name!r} is not an HTTP header name")
    return lowered


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9a-z]+")

_NEVER_IGNORED = (*DEFAULT_IDENTITY_HEADERS, *ALWAYS_KEYED_HEADERS)
_NEVER_IGNORED_RULE = {
    "rule": f"!self.exists(h, h.lowerAscii() in {list(_NEVER_IGNORED)!r})",
    "message": "ignoreHeaders cannot name a header that carries identity or the protocol "
    f"({', '.join(_NEVER_IGNORED)})",
}
"""`_identity_is_never_ignored` as the API server checks it (for the default identity
headers; the model also refuses the server's own)."""


def _header_list(most: int, *rules: dict[str, str]) -> SchemaHint:
    """What the CRD checks of a header list beyond the model, which lowercases the names
    and takes a repeated one once: header-name syntax in either case, no repeats."""
    extra: dict[str, Any] = {
        "maxItems": most,
        "uniqueItems": True,
        "items": {
            "type": "string",
            "minLength": 1,
            "maxLength": 128,
            "pattern": "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
        },
    }
    if rules:
        extra["x-kubernetes-validations"] = list(rules)
    return SchemaHint(**extra)


class ServerCache(Model):
    """Caching of this server's answers; off unless enabled is true.

    The model of the MCPServer's `spec.cache`: the CRD's schema is generated from it
    (`mcpcache.operator.crd`), field docstrings included, so they speak to the person
    writing the resource."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.ignoreHeaders) || !has(self.identityHeaders) || "
                    "!self.ignoreHeaders.exists(h, self.identityHeaders.exists(i, "
                    "i.lowerAscii() == h.lowerAscii()))",
                    "message": "ignoreHeaders cannot name a header identityHeaders names: it "
                    "carries identity and always stays in the key",
                }
            ]
        }
    )

    enabled: bool = Field(default=False, json_schema_extra=SERVER_DEFAULT)
    """Cache tools/call and resources/read answers of this server (opt-in)."""
    ttl: Duration = Field(
        default=DEFAULT_TTL_SECONDS, gt=0, le=MAX_TTL_SECONDS, json_schema_extra=SERVER_DEFAULT
    )
    """How long an answer is served from the cache, as a duration (30s, 5m, 1h30m); more
    than 0s, at most 24h."""
    max_size: Quantity = Field(default=DEFAULT_MAX_SIZE, ge=1, json_schema_extra=SERVER_DEFAULT)
    """Integer or string: the largest response stored, in bytes (65536) or as a quantity
    (64Ki, 256Ki, 1Mi); at least 1 byte. Values above 1Mi are clamped to 1Mi."""
    metadata_ttl: Duration | None = Field(
        default=None, alias="metadataTTL", gt=0, le=MAX_TTL_SECONDS
    )
    """Cache tools/list, prompts/list, resources/list, resources/templates/list and
    server/discover per caller this long (shortened by the result's ttlMs); unset, they
    are not cached. A duration, more than 0s, at most 24h."""
    stale_if_error: Duration | None = Field(default=None, gt=0, le=MAX_TTL_SECONDS)
    """How long past its TTL an entry may answer when the upstream is unreachable, times
    out or answers 5xx; unset, never. A duration, more than 0s, at most 24h."""
    stale_while_revalidate: Duration | None = Field(default=None, gt=0, le=MAX_TTL_SECONDS)
    """How long past its TTL an entry may answer at once while the sidecar fetches it
    again in the background; unset, never. A duration, more than 0s, at most 24h."""
    age_note: bool = Field(default=False, strict=True)
    """An answer from the cache starts its content with a text item saying how old it is
    (text is the only part sure to reach the model); its age is in the result's _meta
    either way. Changes the result's bytes."""
    revalidate_sample: float = Field(default=0.0, ge=0.0, le=1.0, strict=True)
    """The fraction of hits (0 to 1) fetched again in the background with the hit's own
    request and compared with the entry; a changed answer replaces it. Counted in
    mcpcache_revalidations_total."""
    only_read_only_tools: bool = Field(default=False, strict=True)
    """Cache only tools the server's tools/list marks readOnlyHint (a rule with enabled
    true overrides); tools not yet listed are not cached."""
    tools: tuple[ToolRule, ...] = Field(default=(), max_length=MAX_TOOL_RULES)
    """Per-tool rules; the first rule whose name glob matches the tool applies, otherwise
    the server's settings."""
    identity_headers: Annotated[
        tuple[str, ...],
        AfterValidator(_header_names),
        _header_list(MAX_IGNORED_HEADERS),
    ] = DEFAULT_IDENTITY_HEADERS
    """Request headers that identify an end user (hashed into the key, each to be sent at
    most once). Default authorization, proxy-authorization, cookie, x-api-key. Every
    other forwarded header is key material as well unless ignoreHeaders names it."""
    ignore_headers: Annotated[
        tuple[str, ...],
        AfterValidator(_header_names),
        _header_list(MAX_IGNORED_HEADERS, _NEVER_IGNORED_RULE),
    ] = Field(default=(), max_length=MAX_IGNORED_HEADERS)
    """Forwarded request headers that never change the answer (a per-request id, say),
    left out of the cache key. Every other forwarded header is key material (fail
    closed); identity headers, mcp-session-id and mcp-protocol-version cannot be named."""
    ignore_set_cookie: bool = False
    """Store answers that set a cookie (a load balancer's affinity cookie, say) instead of
    leaving them out of the cache. The cookie still reaches only the caller it was set
    for; it is never stored. Default false."""
    fill_schema_defaults: bool = Field(default=False, strict=True)
    """Key a call as if each omitted top-level argument had the default of the tool's
    inputSchema (learned per caller from the tools/list answers that caller was shown,
    forgotten when the tools change), so that an omitted argument and its explicit
    default share an entry. Only defaults read with certainty (no $ref, no
    anyOf/oneOf/allOf, ...) are used."""
    trust_public_hints: bool = Field(default=False, strict=True)
    """Share among all callers of the server a result the server marks cacheScope public
    (tools/list, prompts/list, resources/list, resources/templates/list, resources/read,
    server/discover). A result marked private is never shared."""
    session_scoped: bool = Field(default=False, strict=True)
    """Keep each legacy session's entries apart (Mcp-Session-Id is then part of the cache
    key and a session's entries end with it), for servers that keep per-session state a
    tool reads or bind a user to a session at initialize. Default false; a new session
    of the same caller (app id, identity headers, protocol version) finds what an
    earlier session stored."""

    @model_validator(mode="after")
    def _identity_is_never_ignored(self) -> Self:
        never = {*DEFAULT_IDENTITY_HEADERS, *self.identity_headers, *ALWAYS_KEYED_HEADERS}
        named = sorted(never.intersection(self.ignore_headers))
        if named:
            raise ValueError(
                f"ignoreHeaders cannot name {', '.join(named)}: it carries identity or the "
                "protocol and always stays in the key"
            )
        return self

    @functools.cached_property
    def _rule_memo(self) -> dict[str, ToolRule | None]:
        return {}

    def rule_for(self, tool: str) -> ToolRule | None:
        """The first rule whose glob matches `tool`, or None (the server's defaults).

        Remembered per tool name for the life of this config, so a hit pays one dict
        lookup; the memo is bounded, since tool names come from callers."""
        if not self.tools:
            return None
        memo = self._rule_memo
        try:
            return memo[tool]
        except KeyError:
            pass
        rule = next((r for r in self.tools if r.matches(tool)), None)
        if len(memo) >= _RULE_MEMO_LIMIT:
            memo.clear()
        memo[tool] = rule
        return rule

    @functools.cached_property
    def _match_memo(self) -> dict[str, tuple[str, ...]]:
        return {}

    @functools.cached_property
    def argument_matches(self) -> tuple[ArgumentMatch, ...]:
        """Every `invalidates` entry of the server's rules that matches on arguments."""
        return tuple(
            r for rule in self.tools for r in rule.invalidates if isinstance(r, ArgumentMatch)
        )

    def matched_arguments(self, tool: str) -> tuple[str, ...]:
        """The arguments some write matches `tool`'s entries on (sorted; remembered per
        tool name, bounded like `rule_for`): their values are recorded with each entry."""
        matches = self.argument_matches
        if not matches:
            return ()
        memo = self._match_memo
        names = memo.get(tool)
        if names is None:
            found = {n for m in matches if fnmatch.fnmatchcase(tool, m.tool) for n in m.match}
            names = tuple(sorted(found))
            if len(memo) >= _RULE_MEMO_LIMIT:
                memo.clear()
            memo[tool] = names
        return names

    def shadowed_rules(self) -> list[tuple[ToolRule, ToolRule]]:
        """Each rule that can never apply, with the earlier rule that hides it."""
        found = []
        for i, rule in enumerate(self.tools):
            earlier = next((e for e in self.tools[:i] if rule.shadowed_by(e)), None)
            if earlier is not None:
                found.append((rule, earlier))
        return found

    @functools.cached_property
    def effective_max_size(self) -> int:
        return min(self.max_size, MAX_SIZE_CEILING)

    @property
    def max_size_clamped(self) -> bool:
        return self.max_size > MAX_SIZE_CEILING

    @functools.cached_property
    def shares_entries(self) -> bool:
        """Whether the server may have entries for every caller (a `scope: public`
        rule, or `trustPublicHints`)."""
        return self.enabled and (
            self.trust_public_hints or any(rule.scope == "public" for rule in self.tools)
        )

    @functools.cached_property
    def keep_stale(self) -> float:
        """How long an expired entry of this server is kept for stale answers (read on
        every miss and stale answer: worked out once per config)."""
        return max(self.stale_if_error or 0.0, self.stale_while_revalidate or 0.0)


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http or https URL")
    return value


class Server(Model):
    """One upstream MCP server the sidecar proxies, reached at `/mcp/<name>`."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)
    url: Annotated[str, AfterValidator(_http_url)]
    timeout: Duration = 30.0
    cache: ServerCache = ServerCache()
    purge: str | None = Field(default=None, max_length=256)
    """A purge marker (the operator copies the MCPServer's `mcpcache.io/purge` annotation
    here): when it changes, every sidecar following this config drops the server's entries."""
