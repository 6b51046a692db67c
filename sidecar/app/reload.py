"""Following the config file: a changed file takes effect without a restart.

Kubernetes updates a mounted ConfigMap by swapping a symlink, so the file is compared
by content, not by modification time. An invalid file keeps the last good config and
says why in the log. Nothing here touches the cache: a config change never flushes it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from ..config import ConfigError, SidecarConfig, parse_config

Parser = Callable[[str, Mapping[str, str] | None], SidecarConfig]

logger = logging.getLogger("mcpcache.sidecar.config")


class ConfigSource:
    """The current configuration, re-read from `path` when its content changes."""

    def __init__(
        self,
        path: Path,
        environ: Mapping[str, str] | None = None,
        allow_missing: bool = False,
        parse: Parser = parse_config,
    ) -> None:
        """`parse` is `parse_config` for a whole config file, `parse_servers_file` for
        an operator-owned one."""
        self.path = path
        self.parse = parse
        self.environ = environ
        self.allow_missing = allow_missing
        self.last_error: str | None = None
        if allow_missing and not path.exists():
            # A pod may start before its namespace has any MCPServer: serve no servers
            # until the operator writes the file.
            self.current: SidecarConfig = parse("servers: []", environ)
            self._digest = b""
            return
        text = path.read_text(encoding="utf-8")
        self.current = parse(text, environ)
        self._digest = hashlib.sha256(text.encode()).digest()

    def __call__(self) -> SidecarConfig:
        return self.current

    def poll(self) -> bool | None:
        """Re-read the file: True if a new config took effect, False if the file is
        invalid (the last good config stays), None if nothing changed."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            if self.allow_missing:
                return None
            return self._reject(f"cannot read {self.path}: {exc}", None)
        except (OSError, UnicodeDecodeError) as exc:
            return self._reject(f"cannot read {self.path}: {exc}", None)
        digest = hashlib.sha256(text.encode()).digest()
        if digest == self._digest:
            return None
        try:
            config = self.parse(text, self.environ)
        except ConfigError as exc:
            return self._reject(str(exc), digest)
        self._digest = digest
        self.last_error = None
        self._warn_fixed_fields(config)
        self.current = config
        logger.info(
            "configuration reloaded",
            extra={"servers": [s.name for s in config.servers], "path": str(self.path)},
        )
        return True

    def _reject(self, why: str, digest: bytes | None) -> bool | None:
        if digest is not None:
            self._digest = digest  # log an invalid file once, not on every poll
        if why == self.last_error:
            return None
        self.last_error = why
        logger.error("configuration rejected; keeping the last good one", extra={"reason": why})
        return False

    def _warn_fixed_fields(self, new: SidecarConfig) -> None:
        old = self.current
        for field in (
            "listen",
            "metrics",
            "cache",
            "allowed_hosts",
            "header_timeout",
            "send_timeout",
            "max_connections",
        ):
            if getattr(old, field) != getattr(new, field):
                logger.warning(
                    "configuration field changed but takes effect only on restart",
                    extra={"field": field},
                )
