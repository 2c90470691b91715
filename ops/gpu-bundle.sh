#!/usr/bin/env bash
# Builds the CUDA backend here (nvcc needs no GPU) and gathers what
# ops/gpu-check.sh runs on a GPU machine into .gpu/: the troupe binary, the
# CUDA test binary, and the one shared library a CUDA image may lack.
# The device tool carries .gpu/ (it is git-ignored):  run(command="bash ops/gpu-check.sh", carry=[".gpu"])
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTROUPE_CUDA=ON >&2
cmake --build "$build" -j"$(nproc)" --target troupe troupe_cuda_tests >&2
rm -rf "$root/.gpu" && mkdir -p "$root/.gpu/lib"
cp "$build/troupe" "$build/tests/troupe_cuda_tests" "$root/.gpu/"
cp -L /lib/x86_64-linux-gnu/libpcre2-8.so.0 "$root/.gpu/lib/"
du -sh "$root/.gpu" >&2
