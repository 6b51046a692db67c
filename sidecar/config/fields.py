"""The building blocks of the config model: limits and defaults, and the field types
that read durations and quantities the way Kubernetes writes them."""

from __future__ import annotations

from typing import Annotated, Any, Final

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    PlainSerializer,
)
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from .errors import shown
from .units import format_duration, format_quantity, parse_duration, parse_quantity

DEFAULT_TTL_SECONDS = 30.0
DEFAULT_MAX_SIZE = 64 << 10
MAX_SIZE_CEILING = 1 << 20
"""A per-response cap above this is clamped to it, not refused."""
DEFAULT_MAX_ENTRIES = 1024
DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_MAX_REQUEST_BYTES = 4 << 20
DEFAULT_MAX_HEADER_BYTES = 64 << 10
MAX_TTL_SECONDS = 24 * 3600.0
"""The longest `ttl` and `metadataTTL` a server may ask for (the CRD says the same)."""
DEFAULT_LISTEN_PORT = 3500
DEFAULT_METRICS_PORT = 9090

DEFAULT_IDENTITY_HEADERS = ("authorization", "proxy-authorization", "cookie", "x-api-key")
"""Request headers that identify an end user: each value present is hashed into the key."""

ALWAYS_KEYED_HEADERS = ("mcp-session-id", "mcp-protocol-version")
"""The legacy session and the protocol version: in the key whatever the config says."""
MAX_IGNORED_HEADERS = 32
DEFAULT_SHARED_TIMEOUT = 0.05
DEFAULT_SHARED_RETRY_AFTER = 5.0


def _duration(value: Any) -> float:
    """A duration string; a bare number only when it is 0 or negative (refused below):
    `ttl: 60` read as seconds surprised people who meant minutes, as Kubernetes'
    `metav1.Duration` refuses it too."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value <= 0:
            return float(value)
        raise ValueError(f"{value:g} has no unit: write a duration with one, e.g. {value:g}s or 5m")
    if isinstance(value, str):
        return parse_duration(value)
    raise ValueError(f"{shown(value)} is not a duration: expected a duration such as 30s or 5m")


def _quantity(value: Any) -> int:
    if isinstance(value, int | str) and not isinstance(value, bool):
        return parse_quantity(value)
    raise ValueError(f"{shown(value)} is not a size: expected a size such as 64Ki or 1Mi")


def _non_negative(value: float) -> float:
    if value < 0:
        raise ValueError(f"{value:g}s is not allowed: a duration must not be negative")
    return value


class SchemaHint:
    """What the JSON schema says of a value beyond pydantic's reading of its type: how
    files and the CRD write it (a duration string, a quantity) rather than how it is held
    in memory (seconds, bytes), and the checks the API server makes of it (the CRD is
    generated from this schema by `mcpcache.operator.crd`). Validation is untouched."""

    def __init__(self, **extra: Any) -> None:
        self.extra = extra

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {**handler(schema), **self.extra}


SERVER_DEFAULT: Final[JsonDict] = {"x-server-default": True}
"""`json_schema_extra` of a field whose default the API server writes into the resource
(as kubebuilder's `+kubebuilder:default` marker): the others stay unset when omitted."""

Duration = Annotated[
    float,
    BeforeValidator(_duration),
    AfterValidator(_non_negative),
    PlainSerializer(format_duration, return_type=str),
    SchemaHint(type="string", format="duration"),
]
"""Seconds in memory; a Go-style duration string in files."""

Quantity = Annotated[
    int,
    BeforeValidator(_quantity),
    PlainSerializer(format_quantity, return_type=str),
    SchemaHint(type=["integer", "string"], format="quantity"),
]
"""Bytes in memory; a Kubernetes quantity string in files."""


class Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


MAX_TOOL_RULES = 64
MAX_RULE_NAMES = 32
MAX_GLOB_LENGTH = 128

Glob = Annotated[str, Field(min_length=1, max_length=MAX_GLOB_LENGTH, pattern=r"^[^\x00-\x1f]+$")]
"""A tool-name pattern in `fnmatch` syntax (`*`, `?`, `[...]`), matched case-sensitively."""
