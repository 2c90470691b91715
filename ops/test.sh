#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what is missing
# (Debian packages, the Python reference environment with llama-cpp-python,
# the default model), builds, and runs the CTest tests.
#   ops/test.sh                 every test but those labelled slow (what CI runs)
#   ops/test.sh -L slow         only the slow ones (minutes each: docs/TESTING.md)
#   ops/test.sh -L unit         only a label (unit, reference, oracle, service, slow)
#   ops/test.sh --sanitize      ASan + UBSan build in build-asan/, then the unit and service
#                               tests but those on the real models (too slow instrumented)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

sanitize=()
if [ "${1:-}" = "--sanitize" ]; then
  shift
  sanitize=(-DTROUPE_SANITIZE=ON)
  export BUILD_DIR="${BUILD_DIR:-$root/build-asan}"
fi
ops/setup.sh
python="$(ops/python-env.sh)"
ops/models.sh qwen2.5-coder-0.5b qwen2.5-coder-1.5b >/dev/null
ops/build.sh -DTROUPE_PYTHON="$python" -DTROUPE_WERROR=ON "${sanitize[@]}"

cd "${BUILD_DIR:-$root/build}"
# A label or name filter given replaces the default, which leaves out slow.
filter=(-LE slow)
((${#sanitize[@]})) && filter=(-L "unit|service" -E "oracle|qwen2.5|docs:")
for a in "$@"; do
  case "$a" in -L|-LE|-R|-E|--label-regex|--label-exclude|--tests-regex|--exclude-regex) filter=() ;; esac
done
ctest --output-on-failure -j"$(nproc)" --timeout 900 "${filter[@]}" "$@"

# Fuzzing (tests/fuzz): each libFuzzer target 20 s over its seeds, in a clang
# ASan + UBSan build of its own (build-fuzz/); only in the default run (CI's).
if (($# == 0)) && ! ((${#sanitize[@]})); then
  "$root/ops/fuzz.sh" --ci 20
fi
