#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what is missing
# (Debian packages, the Python reference environment with llama-cpp-python,
# the default model), builds, and runs every CTest test.
#   ops/test.sh                 everything
#   ops/test.sh -L unit         only a label (unit, reference, tokenizer, oracle, e2e)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

ops/setup.sh
python="$(ops/python-env.sh)"
ops/models.sh qwen2.5-coder-0.5b qwen2.5-coder-1.5b >/dev/null
ops/build.sh -DTROUPE_PYTHON="$python" -DTROUPE_WERROR=ON

cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@"
