#!/usr/bin/env bash
# Configures and builds troupe (Release) into build/. Extra arguments go to
# CMake's configure step, e.g. ops/build.sh -DTROUPE_SANITIZE=ON.
#   ops/build.sh --serve   only the `troupe` binary: no tests, examples or test tools
# BUILD_DIR overrides the folder.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
targets=()
testing=ON
if [ "${1:-}" = "--serve" ]; then
  shift
  targets=(--target troupe)
  testing=OFF
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" -DBUILD_TESTING="$testing" "$@" >&2
cmake --build "$build" -j"$(nproc)" "${targets[@]}" >&2
echo "[build] $build/troupe" >&2
