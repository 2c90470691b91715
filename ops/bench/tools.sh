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
[ $# -ge 1 ] || { echo "usage: ops/bench/tools.sh BFCL_DIR (a checkout of github.com/ShishirPatil/gorilla)" >&2; exit 2; }
bfcl="$(cd "$1" && pwd)"  # the library moves to the repository's root
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_python
model="${MODEL:-qwen2.5-coder-0.5b}"
gguf="$(bench_gguf "$model")"
llama=""
if [ "${PEER:-1}" != 0 ]; then
  bench_llama_tools
  llama="$llama_bin/llama-server"
fi
cpu="$(bench_cpu_line)"
echo "$cpu; troupe $(bench_commit); peer: ${llama:-none}"
exec "$python" ops/bench/tools_bench.py --troupe "$troupe" --llama-server "$llama" --gguf "$gguf" --bfcl "$bfcl" \
  --n "${N:-50}" --threads "${THREADS:-2}" --streams "${STREAMS:-4}" --max-tokens "${MAX_TOKENS:-256}" \
  --out "${OUT:-}" --cpu "$cpu"
