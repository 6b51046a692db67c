#!/usr/bin/env bash
# Mutation testing of the sidecar's pure modules against their fast unit tests, with
# mutmut. Not part of CI's run: it takes minutes per module. Run it after changing one of
# these modules or its tests, and kill (or explain) every mutant that survives.
#
#   bash tests/mutation.sh                 # every module below
#   bash tests/mutation.sh key policy      # some of them
#
# mutmut goes into a throwaway virtualenv of its own (not the project's), and runs in a
# staging copy laid out as `src/mcpcache/sidecar/`, so that the tests import the mutated
# copy and never this checkout (which the project's own venv installs editable).
# Results stay in the staging folder between runs; `--fresh` starts over.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${MCPCACHE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpcache}
python=${PYTHON:-python3}
MUTMUT_VERSION=3.8.1
ALL=(key policy store messages capture units config sse headers session_ids hints notices)
# The fast unit tests that pin these modules down (no sockets, no subprocesses).
TESTS=(
  test_key.py test_key_form.py test_policy.py test_policy_rules.py test_store.py
  test_store_properties.py test_units.py test_config.py test_sse.py test_messages.py
  test_headers.py test_capture.py test_value_forms.py test_event_bounds.py test_store_rules.py
  test_config_tiers.py test_session_ids.py
  test_hints_and_notices.py test_store_layout.py test_observations.py
)

fresh=0
modules=()
for arg in "$@"; do
  case "$arg" in
    --fresh) fresh=1 ;;
    *) modules+=("$arg") ;;
  esac
done
[ ${#modules[@]} -gt 0 ] || modules=("${ALL[@]}")

venv="$cache/mutation-venv-$MUTMUT_VERSION"
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  # The pure modules' own dependencies (from pyproject.toml) and the test runner.
  "$venv/bin/python" - "$ROOT/pyproject.toml" > "$venv/requirements.txt" <<'PY'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
wanted = {"pydantic", "pyyaml", "orjson", "cachetools", "pytest", "hypothesis"}
for requirement in project["dependencies"] + project["optional-dependencies"]["test"]:
    if re.split(r"[<>=\[ ]", requirement)[0].lower() in wanted:
        print(requirement)
PY
  "$venv/bin/python" -m pip install --quiet "mutmut==$MUTMUT_VERSION" -r "$venv/requirements.txt"
  touch "$venv/.complete"
fi

stage="$cache/mutation-stage"
[ "$fresh" = 0 ] || rm -rf "$stage"
mkdir -p "$stage/src/mcpcache/sidecar" "$stage/tests"
# Only changed files are copied, so that mutmut's record of what it already ran holds.
for source in "$ROOT"/sidecar/*.py; do
  target="$stage/src/mcpcache/sidecar/$(basename "$source")"
  cmp -s "$source" "$target" || cp -p "$source" "$target"
done
rm -f "$stage/tests/"*.py
for test in "${TESTS[@]}"; do
  [ -f "$ROOT/tests/sidecar/$test" ] && cp -p "$ROOT/tests/sidecar/$test" "$stage/tests/"
done

only=()
for module in "${modules[@]}"; do
  only+=("\"src/mcpcache/sidecar/$module.py\"")
done
tests=()
for test in "$stage"/tests/*.py; do
  tests+=("\"tests/$(basename "$test")\"")
done
cat > "$stage/pyproject.toml" <<TOML
[tool.mutmut]
source_paths = ["src/mcpcache/sidecar"]
only_mutate = [$(IFS=,; echo "${only[*]}")]
pytest_add_cli_args_test_selection = [$(IFS=,; echo "${tests[*]}")]
pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]

[tool.pytest.ini_options]
filterwarnings = ["ignore::DeprecationWarning"]
TOML

cd "$stage"
"$venv/bin/mutmut" run --max-children "${MUTATION_JOBS:-2}" || true
"$venv/bin/mutmut" results --all true > results.txt || true
echo
echo "per module (killed / all; survived mutants are listed in $stage/results.txt):"
for module in "${modules[@]}"; do
  total=$(grep -c "^ *mcpcache\.sidecar\.$module\.x" results.txt || true)
  killed=$(grep "^ *mcpcache\.sidecar\.$module\.x" results.txt | grep -c ": killed" || true)
  echo "  $module: $killed / $total"
done
grep -E ": (survived|no tests|timeout|suspicious)" results.txt || echo "no surviving mutant"
