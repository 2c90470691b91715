#!/usr/bin/env bash
# The service under load on the default model, with llama.cpp beside it in
# the same run (same GGUF file, same threads):
#   1. N concurrent streams through `troupe serve` (aggregate decode tok/s)
#      against llama.cpp decoding N sequences in one batch
#      (ops/bench/llama_cpp_batched.py) and troupe's engine alone at the same
#      batch (`troupe bench --batch N`); the service's own cost is the share
#      of busy time not spent in engine steps (server Stats);
#   2. Poisson arrivals at several rates: throughput, TTFT and per-token
#      p50/p99, goodput, live-token fraction of the KV pages.
#      The same workload (seeded) then runs on llama-cpp-python's server
#      (one request at a time: it has no parallel slots; queued, not
#      interrupted by newer requests), same file, threads.
# Env: MODEL (qwen2.5-coder-0.5b), THREADS (2), STREAMS (16), PROMPT_TOKENS
# (64), GEN_TOKENS (128), RATES ("0.1 0.2 0.3"), REQUESTS (10 per rate).
# Installs llama-cpp-python's server extras (pinned) into the venv if missing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
model="${MODEL:-qwen2.5-coder-0.5b}" threads="${THREADS:-2}" streams="${STREAMS:-16}"
prompt="${PROMPT_TOKENS:-64}" gen="${GEN_TOKENS:-128}" rates="${RATES:-0.1 0.2 0.3}" requests="${REQUESTS:-10}"
bench_python
path="$(bench_gguf "$model")"
bench_work serve
serve() { bench_serve serve -m "$path" --threads "$threads" --kv-tokens 65536; }

serve
served="$("$python" ops/bench/serve_load.py "$endpoint" concurrent "$streams" "$prompt" "$gen")"
echo "$served"
bench_stop TERM
alone="$("$troupe" bench -m "$path" --threads "$threads" --batch "$streams" --prompt-tokens "$prompt" --gen-tokens "$gen" --repeat 1)"
echo "$alone"
peer="$("$python" ops/bench/llama_cpp_batched.py "$path" "$threads" "$streams" "$prompt" "$gen" 2>/dev/null)"
echo "$peer"
bench_py serve-summary "$served" "$alone" "$peer"

# Each rate on a fresh server with its own prompts: no prefix cached by an earlier rate.
"$python" -c "import llama_cpp.server.app" 2>/dev/null || "$python" -m pip install -q \
  "llama-cpp-python[server]==0.3.36" fastapi==0.165.0 uvicorn==0.54.0 sse-starlette==3.7.0 \
  starlette-context==0.3.6 pydantic-settings==2.16.3 >&2
eos="$("$troupe" inspect "$path" --no-tensors | sed -n 's/.*tokenizer.ggml.eos_token_id[^0-9]*\([0-9]*\).*/\1/p' | head -1),151643,151645"
seed=7
port="$(bench_port)"
for rate in $rates; do
  serve
  "$python" ops/bench/serve_load.py "$endpoint" poisson "$rate" "$requests" "$seed"
  bench_stop TERM

  bench_spawn peer "$python" -m llama_cpp.server --model "$path" --n_threads "$threads" --n_threads_batch "$threads" \
    --n_ctx 4096 --n_batch 512 --interrupt_requests False --host 127.0.0.1 --port "$port"
  bench_ready_http peer "http://127.0.0.1:$port/v1/models"
  "$python" ops/bench/llama_server_load.py "http://127.0.0.1:$port" "$rate" "$requests" "$seed" "$eos"
  bench_stop TERM
  seed=$((seed + 1))
done
