"""The `mcpcache` command."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import logging
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .cache.proposals import merge, propose, render
from .config import LISTEN_PORT_ENV, ConfigError
from .config.units import format_duration

logger = logging.getLogger("mcpcache")


def _sidecar(args: argparse.Namespace) -> int:
    from .app.assembly import Sidecar
    from .app.malloc import map_large_blocks
    from .app.reload import ConfigSource
    from .config import parse_config, parse_servers_file
    from .logs import configure_logging

    configure_logging(args.log_level)
    map_large_blocks()
    try:
        if args.servers_file:
            path, parse = Path(args.servers_file), parse_servers_file
        else:
            path, parse = Path(args.config), parse_config
        source = ConfigSource(path, allow_missing=args.allow_missing_config, parse=parse)
    except ConfigError as exc:
        logger.error("cannot start: invalid configuration", extra={"problems": exc.problems})
        return 2
    except OSError as exc:
        logger.error("cannot start: invalid configuration", extra={"problems": [str(exc)]})
        return 2
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is an optional speed-up
        pass
    asyncio.run(Sidecar(source).serve())
    return 0


def _check_config(args: argparse.Namespace) -> int:
    from .config import dump_config, load_config

    try:
        config = load_config(Path(args.config))
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"invalid: {problem}", file=sys.stderr)
        return 1
    if config.shared_cache is not None:
        config = config.model_copy(update={"shared_cache": config.shared_cache.redacted()})
    sys.stdout.write(dump_config(config))
    return 0


def _admin_call(args: argparse.Namespace, path: str, body: Any = None) -> Any:
    """One request to the sidecar's admin endpoint; the parsed JSON answer."""
    url = args.url.rstrip("/") + path
    data = None if body is None else json.dumps(body).encode()
    headers = {"content-type": "application/json"} if data is not None else {}
    request = urllib.request.Request(url, data=data, headers=headers)
    # No proxy from the environment: the admin endpoint is the pod's own loopback, and a
    # proxy that `HTTP_PROXY` names could answer in the sidecar's place ("purged 42").
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(request, timeout=args.timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = str(exc)
        raise SystemExit(f"{url}: {message}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise SystemExit(f"cannot reach the sidecar at {args.url}: {exc}") from None


def _table(rows: list[list[str]], right: set[int]) -> str:
    # Tool names come from callers: nothing in a cell may act on the terminal.
    rows = [[cell if cell.isprintable() else ascii(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _size(value: int) -> str:
    """Bytes the way the config writes sizes, rounded for reading (`40.3Ki`)."""
    for unit, shift in (("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if value >= 1 << shift:
            scaled = value / (1 << shift)
            return f"{scaled:.0f}{unit}" if scaled == int(scaled) else f"{scaled:.1f}{unit}"
    return str(value)


def _seconds(value: float) -> str:
    """Seconds as durations are written in the config: `850ms`, `12s`, `3h25m4s`."""
    return format_duration(round(value, 3) if value < 1 else round(value))


def _stats(args: argparse.Namespace) -> int:
    stats = _admin_call(args, "/admin/stats")
    if args.output == "json":
        print(json.dumps(stats, indent=2))
        return 0
    print(
        f"{stats['entries']} of {stats['maxEntries']} entries, "
        f"{_size(stats['bytes'])} of {_size(stats['maxBytes'])}; "
        f"{stats['hits']} hits, {stats['misses']} misses since start; "
        f"{stats['upstreamCallsSaved']} upstream calls saved "
        f"({_seconds(stats['upstreamSecondsSaved'])} of upstream time)"
    )
    rows = [["SERVER", "TOOL", "ENTRIES", "BYTES", "HITS", "MISSES", "SAVED", "SAVED-TIME"]]
    for name, server in stats["servers"].items():
        rows.append(
            [name, "*", str(server["entries"]), _size(server["bytes"]),
             str(server["hits"]), str(server["misses"]), str(server["upstreamCallsSaved"]),
             _seconds(server["upstreamSecondsSaved"])]
        )  # fmt: skip
        for tool, counts in server["tools"].items():
            rows.append(["", tool, str(counts["entries"]), _size(counts["bytes"]), *[""] * 4])
        for label, group in (("(resources)", "resources"), ("(lists)", "lists")):
            counts = server.get(group) or {"entries": 0}
            if counts["entries"]:
                size = _size(counts["bytes"])
                rows.append(["", label, str(counts["entries"]), size, *[""] * 4])
    print()
    print(_table(rows, right={2, 3, 4, 5, 6, 7}))
    return 0


def _span(seconds: float | None) -> str:
    """A span as a person reads it (`3h40m`, `12m5s`, `40s`); `-` for none."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def _suggest(args: argparse.Namespace) -> int:
    answer = _admin_call(args, "/admin/suggest")
    others = [_admin_call(argparse.Namespace(**{**vars(args), "url": u}), "/admin/suggest")
              for u in args.also]  # fmt: skip
    if args.output == "json":
        print(json.dumps(answer if not others else [answer, *others], indent=2))
        return 0
    blocks = []
    for name in sorted({n for a in (answer, *others) for n in a["evidence"]}):
        evidence = merge(a["evidence"].get(name, {}) for a in (answer, *others))
        blocks.append(render(name, propose(evidence)))
    if args.output == "yaml":
        print("\n".join(blocks), end="")
        return 0
    rows = [["SERVER", "TOOL", "CALLS", "REPEATS", "ANSWERS", "STABLE FOR", "SUGGESTED TTL"]]
    for name, tools in answer["servers"].items():
        for tool, seen in tools.items():
            rows.append(
                [name, tool, str(seen["calls"]), str(seen["repeats"]), seen["verdict"],
                 _span(seen["stableSeconds"]), seen["suggestedTTL"] or "no suggestion"]
            )  # fmt: skip
    if len(rows) == 1:
        print("no upstream answers seen yet")
        return 0
    print(_table(rows, right={2, 3}))
    print("\nSuggestions only: nothing is applied. Copy a block under the MCPServer's cache:")
    print()
    print("\n".join(blocks), end="")
    return 0


def _purge(args: argparse.Namespace) -> int:
    body = {"server": args.server}
    if args.tool:
        body["tool"] = args.tool
    if args.uri:
        body["uri"] = args.uri
    answer = _admin_call(args, "/admin/purge", body)
    if args.output == "json":
        print(json.dumps(answer, indent=2))
        return 0
    labels = (("tool", "tools"), ("uri", "resource"))
    what = " and ".join(f"{label} {answer[k]}" for k, label in labels if k in answer)
    print(
        f"purged {answer['purged']} entries of server {answer['server']}"
        + (f" ({what})" if what else "")
    )
    return 0


def _admin_options(
    parser: argparse.ArgumentParser, outputs: tuple[str, ...] = ("table", "json")
) -> None:
    port = os.environ.get(LISTEN_PORT_ENV, "3500")
    parser.add_argument(
        "--url",
        default=f"http://127.0.0.1:{port}",
        help="the sidecar's proxy listener (default: loopback, port $MCPCACHE_LISTEN_PORT or 3500)",
    )
    parser.add_argument("--output", choices=outputs, default="table")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds")


def build_parser(added: Iterable[str] = ()) -> argparse.ArgumentParser:
    """The sidecar's commands, and the `added` ones (listed for --help only)."""
    parser = argparse.ArgumentParser(prog="mcpcache", description=__doc__)
    parser.add_argument(
        "--version", action="version", version=f"mcpcache {importlib.metadata.version('mcpcache')}"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    sidecar = commands.add_parser("sidecar", help="run the caching proxy")
    files = sidecar.add_mutually_exclusive_group(required=True)
    files.add_argument("--config", help="YAML or JSON config file: every setting")
    files.add_argument(
        "--servers-file",
        help="an operator-owned file (the namespace's ConfigMap): only its `servers` are "
        "used; every other setting comes from the defaults and the environment, and other "
        "keys in the file are ignored with a warning",
    )
    sidecar.add_argument(
        "--allow-missing-config",
        action="store_true",
        help="start with no servers until the file appears (a not-yet-written ConfigMap)",
    )
    sidecar.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
    )
    sidecar.set_defaults(run=_sidecar)

    check = commands.add_parser("check-config", help="validate a config file and print it")
    check.add_argument("config")
    check.set_defaults(run=_check_config)

    stats = commands.add_parser(
        "stats", help="entries and bytes per server and tool, hits and misses since start"
    )
    _admin_options(stats)
    stats.set_defaults(run=_stats)

    suggest = commands.add_parser(
        "suggest",
        help="per server: tool rules to consider (writes' invalidates with match, TTLs, "
        "scope: public), each with its evidence, as a tools: block (never applied)",
    )
    _admin_options(suggest, ("table", "json", "yaml"))
    suggest.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="URL",
        help="another replica's listener: its evidence is added (each sees only the writes "
        "made through it); repeatable",
    )
    suggest.set_defaults(run=_suggest)

    purge = commands.add_parser(
        "purge", help="drop cached entries of a server (or of some of its tools or a resource)"
    )
    purge.add_argument("--server", required=True, help="the server's name")
    purge.add_argument("--tool", help="only the entries of tools matching this glob")
    purge.add_argument("--uri", help="only the entries of this resource")
    _admin_options(purge)
    purge.set_defaults(run=_purge)

    # Commands other packages add (the operator) parse their own arguments (see main).
    for name in sorted(set(added) - set(commands.choices)):
        commands.add_parser(name, help=f"see `mcpcache {name} --help`", add_help=False)
    return parser


COMMANDS_GROUP = "mcpcache.commands"
"""The entry-point group through which another installed package (the operator) adds a
command: `name = "module:main"`, where `main(argv) -> int` parses its own arguments. The
sidecar names none of them, and imports one only when it is asked to run it."""


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    added = {entry.name: entry for entry in importlib.metadata.entry_points(group=COMMANDS_GROUP)}
    parser = build_parser(added)
    # An added command (unless the sidecar has one of that name: its own have `run`).
    first = arguments[0] if arguments else ""
    if first in added and not hasattr(parser.parse_known_args([first])[0], "run"):
        try:
            command = added[first].load()
        except ImportError as exc:  # installed without what it needs (`.[operator]`)
            missing = f" (missing: {exc.name})" if exc.name else f" ({exc})"
            print(
                f"mcpcache {first}: needs the {first} extras, which are not installed"
                f"{missing}; install them with: pip install 'mcpcache[{first}]'",
                file=sys.stderr,
            )
            return 2
        code: int = command(arguments[1:])
        return code
    args = parser.parse_args(arguments)
    code = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
