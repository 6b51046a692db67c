#!/usr/bin/env bash
# Runs every benchmark next to its baseline; see benchmarks/README.md. `--quick` for a
# short smoke run. Results: benchmarks/results/latest.json and benchmarks.svg.
# `run.sh shared [--quick]` runs the shared-tier benchmark (results/shared-tier.json);
# `run.sh shared-cluster [--quick]` the tier on Redis Cluster and Sentinel beside one
# Redis, and their failovers (results/shared-cluster.json); `run.sh replicas [--quick]`
# how long a removal takes to reach the other replicas' memory (results/replica-propagation.json).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../.ci/env.sh"
if ! command -v wrk >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq wrk >/dev/null
  else
    echo "benchmarks need wrk (Debian/Ubuntu: apt-get install wrk)" >&2
    exit 1
  fi
fi
cd "$MCPCACHE_ROOT"
if [ "${1:-}" = shared ]; then
  shift
  bash .ci/redis-server.sh
  exec python benchmarks/shared_tier.py "$@"
fi
if [ "${1:-}" = shared-cluster ]; then
  shift
  bash .ci/redis-server.sh
  exec python benchmarks/shared_cluster.py "$@"
fi
if [ "${1:-}" = replicas ]; then
  shift
  bash .ci/redis-server.sh
  exec python benchmarks/replica_propagation.py "$@"
fi
exec python benchmarks/run_all.py "$@"
