#!/usr/bin/env bash
# Runs the whole test suite: sets up the Python environment, finds or installs redis-server,
# installs (or reuses) the TypeScript SDK peer and the MCP conformance suite, builds (or reuses) the test control plane,
# Prometheus, the OpenTelemetry Collector, and the node and images of tests/cluster, then
# pytest. Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../.ci/env.sh"
cd "$MCPCACHE_ROOT"
bash .ci/redis-server.sh
if command -v npm >/dev/null 2>&1; then
  MCPCACHE_TYPESCRIPT_PEERS=$(bash tests/peers/typescript/install.sh | tail -n 1)
  export MCPCACHE_TYPESCRIPT_PEERS
  MCPCACHE_CONFORMANCE=$(bash tests/peers/conformance/install.sh | tail -n 1)
  export MCPCACHE_CONFORMANCE
fi

if command -v go >/dev/null 2>&1; then
  MCPCACHE_CONTROLPLANE_BIN=$(bash tests/controlplane/build.sh | tail -n 1)
  export MCPCACHE_CONTROLPLANE_BIN
  MCPCACHE_PROMETHEUS_BIN=$(bash tests/prometheus/build.sh | tail -n 1)
  export MCPCACHE_PROMETHEUS_BIN
  MCPCACHE_OTELCOL_BIN=$(bash tests/otelcol/build.sh | tail -n 1)
  export MCPCACHE_OTELCOL_BIN
  # The real node of tests/cluster (root only): its Debian packages, its Go binaries and
  # the images built from the Dockerfile. MCPCACHE_CLUSTER=0 leaves it out.
  if [ "${MCPCACHE_CLUSTER:-1}" = 1 ] && [ "$(id -u)" = 0 ]; then
    bash tests/node/packages.sh
    MCPCACHE_NODE_BIN=$(bash tests/node/build.sh | tail -n 1)
    export MCPCACHE_NODE_BIN
    MCPCACHE_IMAGES=$(bash tests/node/image.sh "$MCPCACHE_NODE_BIN/pause" | tail -n 1)
    export MCPCACHE_IMAGES
  fi
fi

exec python -m pytest "$@"
