#!/usr/bin/env bash
# The test suite's Redis peer: the Debian `redis-server` binary. Found on PATH (or in
# /usr/bin), or installed with apt-get when running as root. The tests start their own
# server on a free loopback port; no system service is used.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing redis-server" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null
else
  echo "the shared-tier tests need redis-server (Debian/Ubuntu: apt-get install redis-server)" >&2
fi
