"""Draws the spans of one trace, as the tests' collector wrote them, as an SVG waterfall:
the picture on the tracing page is made from the tracing tests' own output.

    MCPCACHE_SPANS_OUT=/tmp/spans.jsonl bash tests/run.sh tests/sidecar/app/test_tracing.py
    python docs/operations/trace_waterfall.py /tmp/spans.jsonl docs/operations/images/trace.svg

It draws the trace of the tests' first miss and hit (the trace whose server spans
include a miss and a hit of `tools/call echo`)."""

from __future__ import annotations

import sys
from html import escape
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from peers.otelcol import ExportedSpan, parse_spans

ROW, LABEL, WIDTH = 46, 300, 900
COLOURS = {"hit": "#2e9d5b", "miss": "#d9822b", "upstream": "#5470c6"}


def pick_trace(spans: list[ExportedSpan]) -> list[ExportedSpan]:
    by_trace: dict[str, list[ExportedSpan]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    for members in by_trace.values():
        outcomes = {s.attributes.get("mcpcache.cache.outcome") for s in members}
        if {"hit", "miss"} <= outcomes:
            return sorted(members, key=lambda s: s.start_ns)
    raise SystemExit("no trace with both a hit and a miss in the file")


def row_label(span: ExportedSpan) -> tuple[str, str, str]:
    outcome = span.attributes.get("mcpcache.cache.outcome")
    if outcome is None:
        return span.name, "upstream call (child span)", COLOURS["upstream"]
    details = [str(span.attributes.get("mcpcache.cache_status", ""))]
    if "mcpcache.age_seconds" in span.attributes:
        details.append(f"age {span.attributes['mcpcache.age_seconds']}s")
    return span.name, "; ".join(details), COLOURS.get(str(outcome), "#888")


def render(spans: list[ExportedSpan]) -> str:
    start = min(s.start_ns for s in spans)
    end = max(s.end_ns for s in spans)
    scale = (WIDTH - LABEL - 90) / max(end - start, 1)
    height = ROW * len(spans) + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="8" y="18" font-weight="bold">trace {spans[0].trace_id[:16]}…: '
        "a miss, then a hit, through the sidecar</text>",
    ]
    indent = {s.span_id: 0 for s in spans}
    for span in spans:
        if span.parent_id in indent:
            indent[span.span_id] = indent[span.parent_id] + 1
    for index, span in enumerate(spans):
        y = 30 + index * ROW
        name, detail, colour = row_label(span)
        x = LABEL + (span.start_ns - start) * scale
        width = max((span.end_ns - span.start_ns) * scale, 2)
        ms = (span.end_ns - span.start_ns) / 1e6
        pad = 8 + 14 * indent[span.span_id]
        parts += [
            f'<text x="{pad}" y="{y + 16}">{escape(name)}</text>',
            f'<text x="{pad}" y="{y + 31}" fill="#555" font-size="10">{escape(detail)}</text>',
            f'<rect x="{x:.1f}" y="{y + 6}" width="{width:.1f}" height="18" fill="{colour}"/>',
            f'<text x="{x + width + 4:.1f}" y="{y + 20}">{ms:.2f} ms</text>',
        ]
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> int:
    source, target = Path(sys.argv[1]), Path(sys.argv[2])
    target.write_text(render(pick_trace(parse_spans(source.read_text()))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
