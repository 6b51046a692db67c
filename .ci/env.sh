# Sourced by tests/run.sh, examples/demo.sh and .ci/run: a virtualenv with the project's
# dependencies at exactly the versions of requirements/dev.txt (hash-checked; the image
# installs the same versions from requirements/image.txt), kept outside the repository
# and reused while the lock, pyproject.toml and the Python version are unchanged. The
# project itself is (re)installed editable each time, which takes a few seconds and
# always points at this checkout.
set -euo pipefail

MCPCACHE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
key=$({ "$python" --version; cat "$MCPCACHE_ROOT/pyproject.toml" "$MCPCACHE_ROOT/requirements/dev.txt"; } | sha256sum | cut -c1-16)
cache=${MCPCACHE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpcache}
venv="$cache/venv-$key"

if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
  echo "setting up $venv" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  # Dependencies first (cached with the venv), then the project itself below.
  "$venv/bin/python" -m pip install --quiet --require-hashes -r "$MCPCACHE_ROOT/requirements/dev.txt"
  touch "$venv/.complete"
fi
if ! log=$("$venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e "$MCPCACHE_ROOT" 2>&1); then
  echo "$log" >&2
  exit 1
fi
export PATH="$venv/bin:$PATH"
export MCPCACHE_ROOT
