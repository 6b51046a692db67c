#!/usr/bin/env bash
# Runs the one-machine demo (see examples/demo.py) in the project's environment.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../.ci/env.sh"
exec python "$MCPCACHE_ROOT/examples/demo.py" "$@"
