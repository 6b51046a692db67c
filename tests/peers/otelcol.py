"""A real OpenTelemetry Collector for the tests, built from its Go modules by
tests/otelcol/build.sh: the OTLP receiver (HTTP) on a loopback port and the file
exporter, which writes every batch it receives to a file as one OTLP JSON line. A test
reads the spans back from that file as the collector got them."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .serving import end_process_group, free_port, log_tail, spawn, wait_until

BIN_ENV = "MCPCACHE_OTELCOL_BIN"
"""Directory with the `otelcol` binary (see tests/otelcol/build.sh)."""

SERVER, CLIENT = 2, 3
"""OTLP's span kinds, as the JSON encoding numbers them."""


@dataclass(frozen=True)
class ExportedSpan:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    service: str
    error: bool


def _value(value: dict[str, Any]) -> Any:
    """An OTLP JSON `AnyValue` as Python (ints arrive as strings, as proto3 JSON has it)."""
    if "intValue" in value:
        return int(value["intValue"])
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in value:
            return value[kind]
    return value


def _attributes(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {item["key"]: _value(item.get("value", {})) for item in items}


def parse_spans(lines: str) -> list[ExportedSpan]:
    """Every span of a file exporter's output (one OTLP `ExportTraceServiceRequest` a line)."""
    found = []
    for line in lines.splitlines():
        if not line.strip():
            continue
        for resource in json.loads(line).get("resourceSpans", []):
            service = _attributes(resource.get("resource", {}).get("attributes", []))
            for scope in resource.get("scopeSpans", []):
                for span in scope.get("spans", []):
                    found.append(
                        ExportedSpan(
                            trace_id=span["traceId"],
                            span_id=span["spanId"],
                            parent_id=span.get("parentSpanId", ""),
                            name=span["name"],
                            kind=span.get("kind", 0),
                            start_ns=int(span["startTimeUnixNano"]),
                            end_ns=int(span["endTimeUnixNano"]),
                            attributes=_attributes(span.get("attributes", [])),
                            service=str(service.get("service.name", "")),
                            error=span.get("status", {}).get("code") == 2,
                        )
                    )
    return found


class Collector:
    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="mcpcache-otelcol-"))
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        """The OTLP/HTTP receiver's base URL (spans go to `/v1/traces`)."""
        self.spans_path = self.dir / "spans.jsonl"
        self.log_path = self.dir / "otelcol.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Collector:
        config = {
            "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{self.port}"}}}},
            "exporters": {"file": {"path": str(self.spans_path), "flush_interval": "50ms"}},
            "service": {
                # No metrics listener of its own (it would take port 8888).
                "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
                "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["file"]}},
            },
        }
        config_path = self.dir / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        self.process = spawn(
            [str(self.bin_dir / "otelcol"), "--config", f"file:{config_path}"], self.log_path
        )
        try:
            wait_until(self._ready, 30, "the collector to listen")
        except Exception:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"the collector exited:\n{log_tail(self.log_path)}")
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def spans(self) -> list[ExportedSpan]:
        """Every span the collector has written so far."""
        try:
            text = self.spans_path.read_text()
        except FileNotFoundError:
            return []
        if not text.endswith("\n"):  # a line still being written
            text = text[: text.rfind("\n") + 1]
        return parse_spans(text)

    def trace(self, trace_id: str) -> list[ExportedSpan]:
        return [span for span in self.spans() if span.trace_id == trace_id]

    def stop(self) -> None:
        if self.process is not None:
            end_process_group(self.process)
            self.process = None

    def remove(self) -> None:
        """Stop, and remove its folder (config, spans, log)."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
