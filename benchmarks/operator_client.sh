#!/usr/bin/env bash
# What one write costs: the `kubernetes` package against the operator's own client
# (see benchmarks/operator_client.py). Argument: the number of calls (default 2000).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../.ci/env.sh"
cd "$MCPCACHE_ROOT"
MCPCACHE_CONTROLPLANE_BIN=${MCPCACHE_CONTROLPLANE_BIN:-$(bash tests/controlplane/build.sh | tail -n 1)}
export MCPCACHE_CONTROLPLANE_BIN
exec python benchmarks/operator_client.py "$@"
