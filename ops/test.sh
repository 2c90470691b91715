#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what is missing
# (Debian packages, the Python reference environment with llama-cpp-python,
# the default model), builds, and runs the CTest tests.
#   ops/test.sh                 what CI runs, one build for each kind of test: the clang ASan +
#                               UBSan build (build-san/) runs every unit and service test and each
#                               fuzz target for 5 s; the optimized build (build/, only the targets
#                               they need) runs what is too slow instrumented: the engine's tests,
#                               the NumPy references, the real models and llama.cpp's oracle
#   ops/test.sh -L slow         only the slow ones (minutes each: docs/TESTING.md)
#   ops/test.sh -L unit         only a label (unit, reference, oracle, service, slow), or -R/-E:
#                               the whole optimized build, then the tests named
#   ops/test.sh --sanitize      the instrumented half of CI's run alone
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

# A label or name filter given replaces the default one.
has_filter() {
  local a
  for a in "$@"; do
    case "$a" in -L|-LE|-R|-E|--label-regex|--label-exclude|--tests-regex|--exclude-regex) return 0 ;; esac
  done
  return 1
}

# What CI runs on the optimized build only, being minutes instrumented: the real models and
# llama.cpp's oracle, the NumPy references, the 300-turn session (32 s plain, 697 s under ASan
# on an AVX2-only EPYC) and the byte cap's 192 MiB of writes (16 s plain, 191 s instrumented;
# its code runs instrumented in the storage tests); and the docs check (nothing to instrument).
# The engine's own tests run on both builds: its kernels are what the optimizer changes.
optimized_only='^(oracle|reference|docs|cuda|cuda host):|qwen2.5|gemma3-270m|300 turns|max-store-bytes'

# One instrumented build serves both the sanitizer run and the fuzz targets:
# clang (libFuzzer is clang's), CUDA off (nvcc does not take its flags), -O0 but
# for the engine and its tests (TROUPE_OPTIMIZE_ENGINE_ONLY: half the compile time),
# line tables for the reports' file:line rather than full debug information (-8 %).
sanitized() {
  local build="${SAN_BUILD_DIR:-$root/build-san}" t0=$SECONDS
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
        -DCMAKE_CXX_COMPILER=clang++ -DTROUPE_CUDA=OFF -DTROUPE_SANITIZE=ON -DTROUPE_FUZZ=ON \
        -DTROUPE_OPTIMIZE_ENGINE_ONLY=ON -DTROUPE_WERROR=ON -DTROUPE_PYTHON="$python" >&2
  cmake --build "$build" -j"$(nproc)" --target all troupe_fuzzers >&2
  echo "[sanitize] built in $((SECONDS - t0)) s" >&2
  cd "$build"
  local filter=(-L "unit|service|fuzz" -LE slow -E "$optimized_only")
  if has_filter "$@"; then filter=(); fi
  run_ctest --output-on-failure -j"$(nproc)" --timeout 900 "${filter[@]}" "$@"
  echo "[sanitize] built and tested in $((SECONDS - t0)) s" >&2
}

# CI's optimized half: only the targets its tests run (the unit tests' own executables
# are built and run instrumented above).
optimized() {
  local build="${BUILD_DIR:-$root/build}" t0=$SECONDS targets=(troupe troupe_engine_tests troupe_service_tests
                                                                troupe_python_messages)
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTROUPE_PYTHON="$python" -DTROUPE_WERROR=ON >&2
  # Not `grep -q`: it stops reading at the first match, make dies of SIGPIPE and pipefail
  # turns the match into a failure (CI's machine has nvcc: its CUDA tests went unbuilt).
  if cmake --build "$build" --target help | grep -w troupe_cuda_tests >/dev/null; then
    targets+=(troupe_cuda_tests troupe_cuda_host_tests)
  fi
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >&2
  echo "[optimized] built in $((SECONDS - t0)) s" >&2
  cd "$build"
  run_ctest --output-on-failure -j"$(nproc)" --timeout 900 -LE slow -R "^engine:|$optimized_only"
  echo "[optimized] built and tested in $((SECONDS - t0)) s" >&2
}

if ((sanitize_only)); then
  sanitized "$@"
  exit 0
fi
if (($# == 0)); then
  (optimized)
  sanitized
  exit 0
fi

ops/build.sh -DTROUPE_PYTHON="$python" -DTROUPE_WERROR=ON
cd "${BUILD_DIR:-$root/build}"
filter=(-LE slow)
if has_filter "$@"; then filter=(); fi
run_ctest --output-on-failure -j"$(nproc)" --timeout 900 "${filter[@]}" "$@"
