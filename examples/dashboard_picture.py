"""A picture of the dashboard's main panels from a real run (Grafana itself is not needed).

Starts the bundled docs server behind a sidecar under two names, scrapes the sidecar with a
real Prometheus every second, drives three phases of traffic with the official MCP client
(a small working set, then one server's callers asking ever new questions, then the small
set again), and draws the dashboard's own queries (from monitoring/dashboard.py) over the
run from Prometheus's query-range API into docs/images/dashboard.png.

Run it with `bash examples/dashboard_picture.sh`, which builds Prometheus first.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monitoring"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import dashboard
import docs_server

from peers.clients import mcp_client
from peers.prometheus import BIN_ENV, PrometheusServer
from peers.serving import ServedApp
from peers.sidecar import RunningSidecar

ROOT = Path(__file__).resolve().parents[1]
PANELS = (
    "Hit ratio per server",
    "Requests by outcome",
    "Upstream latency p50 / p99",
    "Cache entries against the budget",
    "Evictions by reason",
    "Cache bytes against the budget",
)
RATE_WINDOW = "30s"
UNITS = {"percentunit": "ratio", "reqps": "req/s", "ops": "per second", "s": "seconds"}
PHASE_SECONDS = 50.0


async def caller(
    url: str, questions: itertools.cycle[str] | None, stop: float, fresh: bool
) -> None:
    """One agent: asks again and again until `stop`; `fresh` asks a new question each time."""
    counter = itertools.count()
    async with mcp_client(url) as client:
        while time.monotonic() < stop:
            query = f"q{next(counter)}-{random.random()}" if fresh else next(questions)  # type: ignore[arg-type]
            await client.call_tool("search_docs", {"query": query})


async def drive(sidecar: RunningSidecar) -> None:
    small = [f"topic-{i}" for i in range(12)]
    for phase in ("steady", "docs asks new questions", "steady"):
        stop = time.monotonic() + PHASE_SECONDS
        print(f"phase: {phase}", flush=True)
        tasks = []
        for server in ("docs", "search"):
            fresh = server == "docs" and phase != "steady"
            for agent in range(3):
                order = small[agent:] + small[:agent]
                tasks.append(caller(sidecar.url(server), itertools.cycle(order), stop, fresh))
        await asyncio.gather(*tasks)


def legend(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{(\w+)\}\}", lambda m: labels.get(m.group(1), ""), template).strip()


def draw(prometheus: PrometheusServer, start: float, end: float, out: Path) -> None:
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_title = {spec.title: spec for spec in dashboard.PANELS}
    figure, axes = plt.subplots(2, 3, figsize=(15, 7.5), constrained_layout=True)
    for ax, title in zip(axes.flat, PANELS, strict=True):
        spec = by_title[title]
        for expr, template in spec.queries:
            query = (
                expr.replace("$namespace", ".*")
                .replace("$server", ".*")
                .replace("$__rate_interval", RATE_WINDOW)
            )
            for series in prometheus.query_range(query, start, end, 2):
                xs = [float(t) - start for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                ax.plot(xs, ys, label=legend(template, series["metric"]) or "all", linewidth=1.2)
        unit = UNITS.get(spec.unit, spec.unit if spec.unit != "short" else "")
        ax.set_title(f"{title} ({unit})" if unit else title, fontsize=10)
        ax.set_xlabel("seconds", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    figure.suptitle("mcpcache dashboard, main panels (from Prometheus's query-range API)")
    figure.savefig(out, dpi=80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "images" / "dashboard.png")
    args = parser.parse_args()
    logging.disable(logging.INFO)  # one line per request from every layer otherwise
    prometheus = PrometheusServer(Path(os.environ[BIN_ENV])).start(jobs=("mcpcache-sidecar",))
    docs = ServedApp(docs_server.app()).start()
    workdir = Path(tempfile.mkdtemp(prefix="mcpcache-picture-"))
    sidecar = RunningSidecar(
        workdir / "sidecar.yaml",
        {
            "cache": {"maxEntries": 40, "maxBytes": "16Ki"},
            "servers": [
                {
                    "name": name,
                    "url": docs.base_url + "/mcp",
                    "cache": {"enabled": True, "ttl": ttl},
                }
                for name, ttl in (("docs", "20s"), ("search", "2m"))
            ],
        },
    ).start()
    try:
        prometheus.scrape("mcpcache-sidecar", f"127.0.0.1:{sidecar.metrics_port}")
        start = time.time()
        asyncio.run(drive(sidecar))
        end = time.time()
        prometheus.wait_for(f"timestamp(up) > {end + 1}")  # the end state is scraped
        draw(prometheus, start, end, args.output)
        print(f"wrote {args.output}")
    finally:
        sidecar.stop()
        docs.stop()
        prometheus.stop()


if __name__ == "__main__":
    main()
