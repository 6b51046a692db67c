#!/usr/bin/env bash
# Runs the whole test suite: sets up the Python environment, finds or installs redis-server,
# installs (or reuses) the TypeScript SDK peer, builds (or reuses) the test control plane
# and Prometheus, then pytest. Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../.ci/env.sh"
cd "$MCPCACHE_ROOT"
bash .ci/redis-server.sh
if command -v npm >/dev/null 2>&1; then
  MCPCACHE_TYPESCRIPT_PEERS=$(bash tests/peers/typescript/install.sh | tail -n 1)
  export MCPCACHE_TYPESCRIPT_PEERS
fi

if command -v go >/dev/null 2>&1; then
  MCPCACHE_CONTROLPLANE_BIN=$(bash tests/controlplane/build.sh | tail -n 1)
  export MCPCACHE_CONTROLPLANE_BIN
  MCPCACHE_PROMETHEUS_BIN=$(bash tests/prometheus/build.sh | tail -n 1)
  export MCPCACHE_PROMETHEUS_BIN
fi

exec python -m pytest "$@"
