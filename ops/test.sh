#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what is missing
# (Debian packages, the Python reference environment with llama-cpp-python,
# the default model), builds, and runs the CTest tests.
#   ops/test.sh                 what CI runs: every test but those labelled slow in build/,
#                               then the --sanitize run
#   ops/test.sh -L slow         only the slow ones (minutes each: docs/TESTING.md)
#   ops/test.sh -L unit         only a label (unit, reference, oracle, service, slow)
#   ops/test.sh --sanitize      one clang build with ASan + UBSan in build-san/ (with the
#                               libFuzzer targets of tests/fuzz): the unit and service tests but
#                               those on the real models (too slow instrumented), then each
#                               fuzz target for 20 s over its seeds
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

sanitize_only=0
if [ "${1:-}" = "--sanitize" ]; then
  shift
  sanitize_only=1
fi
ops/setup.sh
python="$(ops/python-env.sh)"
ops/models.sh qwen2.5-coder-0.5b qwen2.5-coder-1.5b gemma3-270m >/dev/null

# Everything a run's tests write (synthetic models, server logs, stores)
# goes into one folder of its own, removed after a green run and named
# after a red one, so runs leave nothing behind in /tmp.
run_ctest() {
  local tmp
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/troupe-tests.XXXXXX")"
  if TMPDIR="$tmp" ctest "$@"; then
    rm -rf "$tmp"
  else
    echo "[test] the failed run's files: $tmp" >&2
    return 1
  fi
}

# One instrumented build serves both the sanitizer run and the fuzz targets:
# clang (libFuzzer is clang's), CUDA off (nvcc does not take its flags).
sanitized() {
  local build="${SAN_BUILD_DIR:-$root/build-san}" t0=$SECONDS
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
        -DCMAKE_CXX_COMPILER=clang++ -DTROUPE_CUDA=OFF -DTROUPE_SANITIZE=ON -DTROUPE_FUZZ=ON \
        -DTROUPE_WERROR=ON -DTROUPE_PYTHON="$python" >&2
  cmake --build "$build" -j"$(nproc)" --target all troupe_fuzzers >&2
  echo "[sanitize] built in $((SECONDS - t0)) s" >&2
  cd "$build"
  # Left out instrumented: the real models, the 300-turn session (32 s plain, 697 s under
  # ASan on an AVX2-only EPYC, past its 300 s limit) and the byte cap's 192 MiB of writes
  # (16 s plain, 191 s instrumented; its code runs instrumented in the storage tests):
  # docs/TESTING.md, "Sanitizers".
  run_ctest --output-on-failure -j"$(nproc)" --timeout 900 -L "unit|service|fuzz" -LE slow \
        -E "oracle|qwen2.5|gemma3-270m|docs:|300 turns|max-store-bytes" "$@"
  echo "[sanitize] built and tested in $((SECONDS - t0)) s" >&2
}

if ((sanitize_only)); then
  sanitized "$@"
  exit 0
fi

ops/build.sh -DTROUPE_PYTHON="$python" -DTROUPE_WERROR=ON
cd "${BUILD_DIR:-$root/build}"
# A label or name filter given replaces the default, which leaves out slow.
filter=(-LE slow)
for a in "$@"; do
  case "$a" in -L|-LE|-R|-E|--label-regex|--label-exclude|--tests-regex|--exclude-regex) filter=() ;; esac
done
run_ctest --output-on-failure -j"$(nproc)" --timeout 900 "${filter[@]}" "$@"
# CI's run (no arguments) goes on with the sanitizers and the fuzz targets.
if (($# == 0)); then
  cd "$root"
  sanitized
fi
