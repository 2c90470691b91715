#!/usr/bin/env bash
# A Responses chain of about 4K tokens continued after a kill -9 and restart,
# against recomputing it (ops/bench/responses_bench.py says how each is timed).
#
#   ops/bench/responses.sh
#
# Env: MODEL (qwen2.5-coder-0.5b), THREADS (2), DOC (3600 document tokens), RUNS (3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
py="$(ops/python-env.sh)"
troupe="${BUILD_DIR:-$root/build}/troupe"
[ -x "$troupe" ] || { echo "no $troupe: build troupe first (ops/build.sh)" >&2; exit 1; }
model="${MODEL:-qwen2.5-coder-0.5b}"
ops/models.sh "$model" >/dev/null
gguf="$(ops/models.sh --path "$model")"
cpu="CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) hardware threads"
echo "$cpu; troupe $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
exec "$py" ops/bench/responses_bench.py --troupe "$troupe" --gguf "$gguf" --model "$model" \
  --threads "${THREADS:-2}" --doc "${DOC:-3600}" --runs "${RUNS:-3}" --cpu "$cpu"
