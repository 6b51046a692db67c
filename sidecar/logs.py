"""Structured logs: one JSON object a line. Callers pass fields with `extra=`.

Only fields named in `extra` are written, and the proxy passes none that could carry a
token, an argument value or a cached body.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import orjson

_PLAIN = (str, int, float, bool, type(None), list, tuple, dict)
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
_DROPPED = frozenset({"color_message"})
"""Extras that are not data: uvicorn attaches its message again with ANSI colour codes."""

_ONCE_PER_PROCESS = frozenset(
    {"Started server process [%d]", "Finished server process [%d]", "Shutting down"}
)
"""uvicorn's process-wide lines, which each of the sidecar's two listeners logs."""


class _OncePerProcess(logging.Filter):
    """Lets each of uvicorn's process-wide lines through once: the sidecar runs two
    uvicorn servers in one process, and "Started server process" twice reads as two."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg not in _ONCE_PER_PROCESS:
            return True
        if record.msg in self._seen:
            return False
        self._seen.add(str(record.msg))
        return True


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            # Only plain data: libraries attach whole objects (settings, clients) as extras.
            if key in _STANDARD or key in _DROPPED or key.startswith("_"):
                continue
            if isinstance(value, _PLAIN):
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    uvicorn_lines = logging.getLogger("uvicorn.error")
    uvicorn_lines.filters[:] = [
        f for f in uvicorn_lines.filters if not isinstance(f, _OncePerProcess)
    ]
    uvicorn_lines.addFilter(_OncePerProcess())
    # The proxy logs each upstream call itself; per-request access lines would log hits.
    logging.getLogger("uvicorn.access").disabled = True
