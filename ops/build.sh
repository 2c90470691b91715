#!/usr/bin/env bash
# Configures and builds troupe (Release) into build/. Extra arguments go to
# CMake's configure step, e.g. ops/build.sh -DTROUPE_SANITIZE=ON.
# BUILD_DIR overrides the folder.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" "$@" >&2
cmake --build "$build" -j"$(nproc)" >&2
echo "[build] $build/troupe" >&2
