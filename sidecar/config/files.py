"""Reading and writing the config file: YAML or JSON text in, a checked model out."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .errors import problems
from .fields import MAX_SIZE_CEILING
from .model import SidecarConfig
from .servers import Server
from .units import format_quantity

logger = logging.getLogger("mcpcache.sidecar.config")


class ConfigError(ValueError):
    """The file could not be read or does not describe a valid configuration.

    Its text is one line per problem (`servers[0].cache.ttl: ...`), also kept as
    `problems` for a log record's field."""

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


def _document(text: str) -> dict[str, Any]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML or JSON: {exc}") from exc
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise ConfigError("the top level must be a mapping")
    return document


def _validated(document: Mapping[str, Any], environ: Mapping[str, str] | None) -> SidecarConfig:
    try:
        config = SidecarConfig.model_validate(document)
    except ValidationError as exc:
        raise ConfigError(*problems(exc, SidecarConfig)) from exc
    try:
        config = config.with_environment(os.environ if environ is None else environ)
        config.check_not_self()
    except ValueError as exc:
        raise ConfigError(*str(exc).splitlines()) from exc
    _log_clamps(config)
    return config


def _log_clamps(config: SidecarConfig) -> None:
    """A `maxSize` above the ceiling is clamped, not refused (as the operator does, with
    a Warning event there): say so, once per file read."""
    for server in config.servers:
        if server.cache.max_size_clamped:
            logger.warning(
                "maxSize above the ceiling: clamped",
                extra={
                    "server": server.name,
                    "maxSize": format_quantity(server.cache.max_size),
                    "applied": format_quantity(MAX_SIZE_CEILING),
                },
            )


def parse_config(text: str, environ: Mapping[str, str] | None = None) -> SidecarConfig:
    """Parse YAML or JSON (JSON is YAML) text into a config, applying the environment."""
    return _validated(_document(text), environ)


SERVERS_FILE_KEYS = frozenset({"servers"})
"""What the sidecar takes from an operator-owned servers file (`--servers-file`)."""


def parse_servers_file(text: str, environ: Mapping[str, str] | None = None) -> SidecarConfig:
    """Parse an operator-owned file: only its `servers`; every other setting comes from
    the defaults and the environment (the injected container's own arguments).

    In Kubernetes this file is the namespace's ConfigMap, which anyone who may edit
    ConfigMaps there can change. Listeners, budgets, limits and allowed hosts must not be
    theirs to set, so other top-level keys are ignored, with a warning naming them."""
    document = _document(text)
    if ignored := sorted(str(key) for key in document if key not in SERVERS_FILE_KEYS):
        logger.warning(
            "servers file: keys other than 'servers' are ignored; set them on the "
            "sidecar's command line or environment",
            extra={"ignored": ignored},
        )
    return _validated({k: v for k, v in document.items() if k in SERVERS_FILE_KEYS}, environ)


def load_config(path: Path, environ: Mapping[str, str] | None = None) -> SidecarConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    return parse_config(text, environ)


def dump_config(config: SidecarConfig) -> str:
    """Serialise as YAML in the file form (stable key order, for diffable ConfigMaps)."""
    return yaml.safe_dump(config.to_document(), sort_keys=False)


def dump_servers(servers: tuple[Server, ...]) -> str:
    """The servers file: `servers` only, in the same file form."""
    document = SidecarConfig(servers=servers).to_document()
    return yaml.safe_dump({"servers": document["servers"]}, sort_keys=False)
