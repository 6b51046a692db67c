#!/usr/bin/env bash
# The import-linter contracts of pyproject.toml (the packages' layers). The operator's
# folder is a namespace portion on purpose (with an __init__.py, running anything from
# the repository's root would shadow the standard library's `operator`), and grimp reads
# only regular packages: the check runs on a copy laid out as one regular `mcpcache`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/mcpcache"
cp -r "$root/sidecar" "$root/operator" "$stage/mcpcache/"
touch "$stage/mcpcache/__init__.py" "$stage/mcpcache/operator/__init__.py"
sed 's/^root_packages = .*/root_packages = ["mcpcache"]/' "$root/pyproject.toml" > "$stage/pyproject.toml"
cd "$stage"
PYTHONPATH="$stage" lint-imports "$stage/pyproject.toml" --no-cache
