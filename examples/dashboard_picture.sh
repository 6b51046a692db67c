#!/usr/bin/env bash
# Draws docs/images/dashboard.png from a real run (see examples/dashboard_picture.py).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../.ci/env.sh"
MCPCACHE_PROMETHEUS_BIN=$(bash "$MCPCACHE_ROOT/tests/prometheus/build.sh" | tail -n 1)
export MCPCACHE_PROMETHEUS_BIN
exec python "$MCPCACHE_ROOT/examples/dashboard_picture.py" "$@"
