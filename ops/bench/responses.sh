#!/usr/bin/env bash
# A Responses chain of about 4K tokens continued after a kill -9 and restart,
# against recomputing it (ops/bench/responses_bench.py says how each is timed).
#
#   ops/bench/responses.sh
#
# Env: MODEL (qwen2.5-coder-0.5b), THREADS (2), DOC (3600 document tokens), RUNS (3).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_python
model="${MODEL:-qwen2.5-coder-0.5b}"
gguf="$(bench_gguf "$model")"
cpu="$(bench_cpu_line)"
echo "$cpu; troupe $(bench_commit)"
exec "$python" ops/bench/responses_bench.py --troupe "$troupe" --gguf "$gguf" --model "$model" \
  --threads "${THREADS:-2}" --doc "${DOC:-3600}" --runs "${RUNS:-3}" --cpu "$cpu"
