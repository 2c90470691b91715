#!/usr/bin/env bash
# Tool-calling accuracy (docs/TOOLS.md) on BFCL's simple_python and multiple categories,
# troupe against llama-server --jinja on the same GGUF, same threads, same run
# (ops/bench/tools_bench.py says what is counted).
#
#   ops/bench/tools.sh BFCL_DIR
#
# BFCL_DIR: a checkout (or bare git repository) of github.com/ShishirPatil/gorilla.
# Env: MODEL (qwen2.5-coder-0.5b), N (50 items per category), THREADS (2), STREAMS (4),
# MAX_TOKENS (256), PEER (1; 0 leaves llama-server out), OUT (answers; default a new dir).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
[ $# -ge 1 ] || { echo "usage: ops/bench/tools.sh BFCL_DIR (a checkout of github.com/ShishirPatil/gorilla)" >&2; exit 2; }
py="$(ops/python-env.sh)"
troupe="${BUILD_DIR:-$root/build}/troupe"
[ -x "$troupe" ] || { echo "no $troupe: build troupe first (ops/build.sh)" >&2; exit 1; }
model="${MODEL:-qwen2.5-coder-0.5b}"
ops/models.sh "$model" >/dev/null
gguf="$(ops/models.sh --path "$model")"
llama=""
[ "${PEER:-1}" != 0 ] && llama="$(ops/llama-tools.sh)/llama-server"
cpu="CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) hardware threads"
echo "$cpu; troupe $(git rev-parse --short HEAD 2>/dev/null || echo '?'); peer: ${llama:-none}"
exec "$py" ops/bench/tools_bench.py --troupe "$troupe" --llama-server "$llama" --gguf "$gguf" --bfcl "$1" \
  --n "${N:-50}" --threads "${THREADS:-2}" --streams "${STREAMS:-4}" --max-tokens "${MAX_TOKENS:-256}" \
  --out "${OUT:-}" --cpu "$cpu"
