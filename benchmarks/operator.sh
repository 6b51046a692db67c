#!/usr/bin/env bash
# The operator at scale (see benchmarks/README.md): N MCPServers in N/10 namespaces on
# the test control plane. Arguments: the sizes (default 1000 3000), --json FILE.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../.ci/env.sh"
cd "$MCPCACHE_ROOT"
MCPCACHE_CONTROLPLANE_BIN=${MCPCACHE_CONTROLPLANE_BIN:-$(bash tests/controlplane/build.sh | tail -n 1)}
export MCPCACHE_CONTROLPLANE_BIN
exec python benchmarks/operator_scale.py "$@"
