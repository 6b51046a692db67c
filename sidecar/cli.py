"""The `mcpcache` command."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from .config import ConfigError

logger = logging.getLogger("mcpcache")


def _sidecar(args: argparse.Namespace) -> int:
    from .app import Sidecar
    from .config import parse_config, parse_servers_file
    from .logs import configure_logging
    from .memory import map_large_blocks
    from .reload import ConfigSource

    configure_logging(args.log_level)
    map_large_blocks()
    try:
        if args.servers_file:
            path, parse = Path(args.servers_file), parse_servers_file
        else:
            path, parse = Path(args.config), parse_config
        source = ConfigSource(path, allow_missing=args.allow_missing_config, parse=parse)
    except (OSError, ConfigError) as exc:
        logger.error("cannot start: invalid configuration", extra={"reason": str(exc)})
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
        print(f"invalid: {exc}", file=sys.stderr)
        return 1
    if config.shared_cache is not None:
        config = config.model_copy(update={"shared_cache": config.shared_cache.redacted()})
    sys.stdout.write(dump_config(config))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcpcache", description=__doc__)
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
    sidecar.add_argument("--log-level", default="INFO")
    sidecar.set_defaults(run=_sidecar)

    check = commands.add_parser("check-config", help="validate a config file and print it")
    check.add_argument("config")
    check.set_defaults(run=_check_config)

    # Parsed by the operator itself (see _operator); listed here for --help.
    commands.add_parser("operator", help="run the Kubernetes operator", add_help=False)
    return parser


def _operator(argv: Sequence[str]) -> int:
    # Imported by name only: the sidecar knows nothing of Kubernetes.
    try:
        module = importlib.import_module("mcpcache.operator.cli")
    except ImportError as exc:
        print(f"the operator is not available in this installation: {exc}", file=sys.stderr)
        return 2
    code: int = module.main(argv)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["operator"]:
        return _operator(arguments[1:])
    args = build_parser().parse_args(arguments)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
