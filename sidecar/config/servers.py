"""One upstream server's settings: its address, its cache block and its tool rules."""

from __future__ import annotations

import fnmatch
import functools
import re
from typing import Annotated, Self
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
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
    Duration,
    Model,
    Quantity,
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


class ServerCache(Model):
    """Per-server caching policy, mirroring the MCPServer's `spec.cache`.

    The bounds are the CRD's too (a test runs one table of values through both)."""

    enabled: bool = False
    ttl: Duration = Field(default=DEFAULT_TTL_SECONDS, gt=0, le=MAX_TTL_SECONDS)
    max_size: Quantity = Field(default=DEFAULT_MAX_SIZE, ge=1)
    metadata_ttl: Duration | None = Field(
        default=None, alias="metadataTTL", gt=0, le=MAX_TTL_SECONDS
    )
    """How long list results and `server/discover` are cached (per caller); unset: never."""
    stale_if_error: Duration | None = Field(default=None, gt=0, le=MAX_TTL_SECONDS)
    """How long past its TTL an entry may answer when the upstream fails; unset: never."""
    stale_while_revalidate: Duration | None = Field(default=None, gt=0, le=MAX_TTL_SECONDS)
    """How long past its TTL an entry may answer at once while it is fetched again."""
    age_note: bool = Field(default=False, strict=True)
    """A hit's (or stale answer's) first text content item says how old it is: text is
    the only part of a result sure to reach the model. The age is in `_meta` always."""
    revalidate_sample: float = Field(default=0.0, ge=0.0, le=1.0, strict=True)
    """The fraction of hits fetched again in the background, with the hit's own request,
    and compared with the entry (a changed answer replaces it)."""
    only_read_only_tools: bool = Field(default=False, strict=True)
    """Cache only tools the server's `tools/list` marks `readOnlyHint: true` (a rule with
    `enabled: true` overrides); a tool the sidecar has not seen listed is not cached."""
    tools: tuple[ToolRule, ...] = Field(default=(), max_length=MAX_TOOL_RULES)
    identity_headers: Annotated[tuple[str, ...], AfterValidator(_header_names)] = (
        DEFAULT_IDENTITY_HEADERS
    )
    """Headers whose values (hashed) separate one end user's entries from another's,
    always, and that a request must send at most once."""
    ignore_headers: Annotated[tuple[str, ...], AfterValidator(_header_names)] = Field(
        default=(), max_length=MAX_IGNORED_HEADERS
    )
    """Forwarded request headers that do not change the answer (a per-request id, say),
    left out of the key. Every other forwarded header is key material (fail closed)."""
    ignore_set_cookie: bool = False
    """Store answers that set a cookie (a load balancer's affinity cookie, say). The
    cookie still reaches only the caller it was set for; it is never stored."""
    fill_schema_defaults: bool = Field(default=False, strict=True)
    """Key a call as if each omitted top-level argument had the default the tool's
    `inputSchema` gives it, where the sidecar has read that default with certainty."""
    trust_public_hints: bool = Field(default=False, strict=True)
    """Share among all callers a result the server marks `cacheScope: "public"` (the six
    results that carry it); without it such results are kept per caller."""
    session_scoped: bool = Field(default=False, strict=True)
    """Keep each legacy session's entries apart (its `Mcp-Session-Id` is key material,
    and its entries end with it): for a server that keeps per-session state a tool
    reads, or binds a user to a session at `initialize`. Unset, a session is not an
    identity: a new session of the same caller finds what an earlier one stored."""

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

    @property
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

    @property
    def keep_stale(self) -> float:
        """How long an expired entry of this server is kept for stale answers."""
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
