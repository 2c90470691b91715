#!/usr/bin/env bash
# The main job on a fresh machine: installs what is missing, builds, fetches
# the default model and streams a real answer to a real prompt.
#   ops/demo.sh ["your question"]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

ops/setup.sh
ops/build.sh
ops/models.sh qwen2.5-coder-0.5b >/dev/null

question="${1:-Write a Python function that checks whether a string is a palindrome, with a short explanation.}"
echo "[demo] troupe generate --model qwen2.5-coder-0.5b --chat \"$question\"" >&2
exec "${BUILD_DIR:-$root/build}/troupe" generate --model qwen2.5-coder-0.5b --chat "$question" \
  --max-tokens 200 --temperature 0.3
