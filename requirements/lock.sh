#!/usr/bin/env bash
# Regenerates the two lock files from pyproject.toml, each version pinned with the
# SHA-256 of every file PyPI has for it, for CPython 3.11 on x86-64 Linux:
#   image.txt  what the image installs (the dependencies, the `operator` and `tracing`
#              extras, plus the build backend of build.in, since the image builds
#              mcpcache without isolation);
#   dev.txt    the test environment (.ci/env.sh): every extra, with each package that
#              image.txt also holds at the very same version (tests/packaging checks it);
#   peers.txt  what the cluster tests' peer image adds to the image (peers.in: the MCP
#              SDK for the agent and server pods), at dev.txt's versions.
# Run it after changing a dependency in pyproject.toml, and commit both files.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tool=$(mktemp -d)
trap 'rm -rf "$tool"' EXIT
python3 -m venv "$tool/venv"
"$tool/venv/bin/pip" install --quiet "uv==0.13.8"
uv=("$tool/venv/bin/uv" pip compile --quiet --generate-hashes --python-version 3.11
  --python-platform x86_64-manylinux_2_28 --only-binary :all: --no-header --annotation-style line)
cd "$here/.."
"${uv[@]}" pyproject.toml requirements/build.in --extra operator --extra tracing -o requirements/image.txt
"${uv[@]}" pyproject.toml requirements/build.in --all-extras -c requirements/image.txt \
  -o requirements/dev.txt
"${uv[@]}" requirements/peers.in -c requirements/dev.txt -o requirements/peers.txt
