#!/usr/bin/env bash
# The test suite's Redis peers: the Debian `redis-server` binary (one server, and six in
# cluster mode made into a cluster with `redis-cli --cluster create`) and `redis-sentinel`
# (its own Debian package: the sentinel-mode entry point and its configuration). Found on
# PATH (or in /usr/bin), or installed with apt-get when running as root. The tests start
# their own processes on free loopback ports; no system service is used.
set -euo pipefail
missing=()
for binary in redis-server redis-sentinel; do
  if ! command -v "$binary" >/dev/null 2>&1 && [ ! -x "/usr/bin/$binary" ]; then
    missing+=("$binary")
  fi
done
if [ "${#missing[@]}" = 0 ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]}" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "the shared-tier tests need ${missing[*]} (Debian/Ubuntu: apt-get install ${missing[*]})" >&2
fi
