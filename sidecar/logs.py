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
            if key not in _STANDARD and not key.startswith("_") and isinstance(value, _PLAIN):
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
    # The proxy logs each upstream call itself; per-request access lines would log hits.
    logging.getLogger("uvicorn.access").disabled = True
