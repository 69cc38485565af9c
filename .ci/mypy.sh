#!/usr/bin/env bash
# Type-checks the package with mypy against the baseline in .ci/mypy-baseline.txt.
#
# The folders install as one package through setup.py's package-dir map, which mypy
# cannot follow, so this lays the same tree out with symlinks under .mypy_tree/ember
# and checks that. Errors are compared without line numbers, so an edit that moves
# code does not churn the baseline; a new error fails, and so does a baseline entry
# that no longer occurs (the baseline only shrinks: run with --update to shrink it).
#   .ci/mypy.sh            check against the baseline
#   .ci/mypy.sh --update   rewrite the baseline from the current errors
#   .ci/mypy.sh --count    print the number of errors
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C  # one sort order for the baseline and the check (comm needs it)
PY=${PYTHON:-.venv/bin/python}
tree=.mypy_tree
rm -rf "$tree" && mkdir -p "$tree/ember"
for f in ember/*; do ln -s "../../$f" "$tree/ember/$(basename "$f")"; done
for d in tir codegen_llvm codegen_cuda frontend tuner; do ln -s "../../$d" "$tree/ember/$d"; done
rc=0
raw=$("$PY" -m mypy --config-file pyproject.toml "$tree/ember" 2>&1) || rc=$?
if ((rc > 1)); then  # 1 means "found errors"; anything else is mypy failing to run
  printf '%s\n' "$raw" >&2
  echo "mypy: did not run (exit $rc)" >&2
  exit 2
fi
errors=$(printf '%s\n' "$raw" | grep -E '^[^ ]+:[0-9]+: error:' \
  | sed -E "s#^$tree/ember/##; s#^([^:]+):[0-9]+: #\1: #" | sort)
case "${1:-}" in
  --count) printf '%s\n' "$errors" | grep -c . || true ;;
  --update) printf '%s\n' "$errors" > .ci/mypy-baseline.txt
            echo "mypy baseline: $(grep -c . .ci/mypy-baseline.txt) errors" ;;
  *)
    new=$(comm -23 <(printf '%s\n' "$errors") .ci/mypy-baseline.txt)
    gone=$(comm -13 <(printf '%s\n' "$errors") .ci/mypy-baseline.txt)
    if [[ -n "$new" ]]; then
      echo "mypy: errors not in the baseline:"; printf '%s\n' "$new"; exit 1
    fi
    if [[ -n "$gone" ]]; then
      echo "mypy: fixed errors still in .ci/mypy-baseline.txt (run .ci/mypy.sh --update):"
      printf '%s\n' "$gone"; exit 1
    fi
    echo "mypy: $(printf '%s\n' "$errors" | grep -c . || true) errors, all in the baseline" ;;
esac
