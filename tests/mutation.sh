#!/usr/bin/env bash
# Mutation testing of the pure modules (and the pure parts of a few others) against their
# fast unit tests (tests/pure/), with mutmut. Not part of CI's run: it takes minutes per
# module. Run it after changing one of these modules or its tests, and kill (or explain)
# every mutant that survives.
#
#   bash tests/mutation.sh                            # every module below
#   bash tests/mutation.sh rules/key/cache_key cache/store   # some (sidecar/ is implied)
#   bash tests/mutation.sh operator/resource          # an operator module
#   bash tests/mutation.sh --fresh rules/key/cache_key  # forget earlier results first
#
# A module is named by its path without `.py`, under `sidecar/` unless it starts with
# `operator/`. mutmut goes into a throwaway virtualenv of its own (not the project's), and
# runs in a staging copy of the package tree laid out as `src/mcpcache/sidecar/` and
# `src/mcpcache/operator/`, so that the tests import the mutated copy and never this
# checkout (which the project's own venv installs editable). Results stay in the staging
# folder between runs; `--fresh` starts over. MUTATION_JOBS sets mutmut's parallelism.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${MCPCACHE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpcache}
python=${PYTHON:-python3}
MUTMUT_VERSION=3.8.1
ALL=(
  rules/key/cache_key rules/key/callers rules/policy/plan rules/policy/keys rules/policy/arguments
  rules/admission/judgement rules/admission/response_headers rules/admission/sharing
  rules/admission/capture rules/admission/freshness rules/protocol/messages rules/protocol/results
  rules/protocol/events rules/protocol/session_ids rules/reading/body rules/reading/numbers
  rules/reading/headers rules/reading/arguments rules/invalidation/writes
  rules/invalidation/removals rules/invalidation/notices rules/learned_tools rules/cache_status
  cache/store config/units config/fields config/servers config/tools config/model
  upstream/flights proxy/invalidator tiers/codec tiers/breaker app/admin
  operator/resource operator/configmap operator/status operator/injection
)
fresh=0
modules=()
for arg in "$@"; do
  case "$arg" in
    --fresh) fresh=1 ;;
    operator/* | sidecar/*) modules+=("${arg%.py}") ;;
    *) modules+=("sidecar/${arg%.py}") ;;
  esac
done
[ ${#modules[@]} -gt 0 ] || for module in "${ALL[@]}"; do
  case "$module" in
    operator/*) modules+=("$module") ;;
    *) modules+=("sidecar/$module") ;;
  esac
done
for module in "${modules[@]}"; do
  [ -f "$ROOT/$module.py" ] || { echo "no such module: $module.py" >&2; exit 2; }
done

# The modules under test import the sidecar's web and Redis layers too, so the venv holds
# every runtime dependency of pyproject.toml, plus the test runner and its plugins.
requirements=$("$python" - "$ROOT/pyproject.toml" <<'PY'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
wanted = {"pytest", "pytest-asyncio", "hypothesis"}
print("\n".join(project["dependencies"]))
for requirement in project["optional-dependencies"]["test"]:
    if re.split(r"[<>=\[ ]", requirement)[0].lower() in wanted:
        print(requirement)
PY
)
key=$(printf '%s\n' "$requirements" | sha256sum | cut -c1-12)
venv="$cache/mutation-venv-$MUTMUT_VERSION-$key"
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  printf '%s\n' "$requirements" > "$venv/requirements.txt"
  "$venv/bin/python" -m pip install --quiet "mutmut==$MUTMUT_VERSION" -r "$venv/requirements.txt"
  touch "$venv/.complete"
fi

# One staging folder per module (mutmut keeps its mutants and results there, and only
# makes mutants of the files named when the folder is new).
stages="$cache/mutation-stage"
if [ "$fresh" = 1 ]; then
  for module in "${modules[@]}"; do
    rm -rf "${stages:?}/$module"
  done
fi

stage_module() {  # the package tree, the tests and mutmut's settings for module $1
  local stage=$1 module=$2 package path source target test
  mkdir -p "$stage/src/mcpcache"
  # The package tree as the distribution maps it (sidecar/ and operator/ under
  # mcpcache/). Only changed files are copied, so that mutmut's record of what it already
  # ran holds; files gone from the checkout go from the stage too.
  for package in sidecar operator; do
    while read -r path; do
      source="$ROOT/$package/$path"
      target="$stage/src/mcpcache/$package/$path"
      mkdir -p "$(dirname "$target")"
      cmp -s "$source" "$target" || cp -p "$source" "$target"
    done < <(cd "$ROOT/$package" && find . -name '*.py' -not -path '*/__pycache__/*')
    if [ -d "$stage/src/mcpcache/$package" ]; then
      while read -r path; do
        [ -f "$ROOT/$package/$path" ] || rm -f "$stage/src/mcpcache/$package/$path"
      done < <(cd "$stage/src/mcpcache/$package" && find . -name '*.py')
    fi
  done
  # The tests that pin the modules down: all of tests/pure/ (no sockets, no subprocesses:
  # its conftest.py, copied with it, refuses both), with the shared helpers of
  # tests/peers/ and an empty tests/conftest.py (so that pytest puts tests/ on the path
  # for `peers`, as in the full suite).
  rm -rf "$stage/tests"
  mkdir -p "$stage/tests"
  cp -rp "$ROOT/tests/peers" "$stage/tests/peers"
  cp -rp "$ROOT/tests/pure" "$stage/tests/pure"
  : > "$stage/tests/conftest.py"
  cat > "$stage/pyproject.toml" <<TOML
[tool.mutmut]
source_paths = ["src/mcpcache"]
only_mutate = ["src/mcpcache/$module.py"]
pytest_add_cli_args_test_selection = ["tests/pure"]
pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]

[tool.pytest.ini_options]
asyncio_mode = "auto"
asyncio_default_fixture_loop_scope = "session"
asyncio_default_test_loop_scope = "session"
filterwarnings = ["ignore::DeprecationWarning"]
TOML
}

table=()
for module in "${modules[@]}"; do
  stage="$stages/$module"
  stage_module "$stage" "$module"
  (cd "$stage" && "$venv/bin/mutmut" run --max-children "${MUTATION_JOBS:-2}") || true
  (cd "$stage" && "$venv/bin/mutmut" results --all true > results.txt) || true
  prefix="mcpcache\.$(echo "$module" | tr / .)"
  total=$(grep -c "^ *$prefix\.x" "$stage/results.txt" || true)
  killed=$(grep "^ *$prefix\.x" "$stage/results.txt" | grep -c ": killed" || true)
  table+=("  ${module#sidecar/}: $killed / $total")
  while read -r line; do
    table+=("    $line")
  done < <(grep "^ *$prefix\.x" "$stage/results.txt" | grep -E ": (survived|no tests|timeout|suspicious)" || true)
done
echo
echo "per module (killed / all, then every mutant not killed; details: mutmut show NAME in $stages/MODULE):"
printf '%s\n' "${table[@]}"
