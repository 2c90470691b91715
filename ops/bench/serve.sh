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
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
model="${MODEL:-qwen2.5-coder-0.5b}" threads="${THREADS:-2}" streams="${STREAMS:-16}"
prompt="${PROMPT_TOKENS:-64}" gen="${GEN_TOKENS:-128}" rates="${RATES:-0.1 0.2 0.3}" requests="${REQUESTS:-10}"
python="$(ops/python-env.sh)"
path="$(ops/models.sh --path "$model")"
troupe="${BUILD_DIR:-$root/build}/troupe"
export PYTHONPATH="${BUILD_DIR:-$root/build}/python:$root/clients/python"
endpoint="ipc:///tmp/troupe-bench-serve-$$.sock"
log="$(mktemp -t troupe-bench-serve.XXXXXX.log)"
data="$(mktemp -d -t troupe-bench-data.XXXXXX)"

"$troupe" serve -m "$path" --listen "$endpoint" --threads "$threads" --kv-tokens 65536 --data-dir "$data" >"$log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$data"' EXIT
until grep -q "listening on" "$log"; do kill -0 $server || { cat "$log"; exit 1; }; sleep 0.1; done

served="$("$python" ops/bench/serve_load.py "$endpoint" concurrent "$streams" "$prompt" "$gen")"
echo "$served"
kill -TERM $server; wait $server || true
alone="$("$troupe" bench -m "$path" --threads "$threads" --batch "$streams" --prompt-tokens "$prompt" --gen-tokens "$gen" --repeat 1)"
echo "$alone"
peer="$("$python" ops/bench/llama_cpp_batched.py "$path" "$threads" "$streams" "$prompt" "$gen" 2>/dev/null)"
echo "$peer"
"$python" - "$served" "$alone" "$peer" <<'PY'
import json, sys
served, alone, peer = (json.loads(a) for a in sys.argv[1:4])
s, a, p = served["aggregate_decode_tok_s"], alone["decode_tok_s"], peer["decode_tok_s"]
w = served["all_decoding_tok_s"] or 0.0
print(f"{served['streams']} streams: troupe serve {s:.1f} tok/s aggregate decode ({w:.1f} while all decode), "
      f"troupe engine alone {a:.1f}, llama.cpp batched {p:.1f}: serve/llama.cpp {s / p:.2f}x "
      f"(while all decode {w / p:.2f}x), engine/llama.cpp {a / p:.2f}x; "
      f"service cost {100 * served['service_cost']:.2f} % of busy time")
PY

# Each rate on a fresh server with its own prompts: no prefix cached by an earlier rate.
"$python" -c "import llama_cpp.server.app" 2>/dev/null || "$python" -m pip install -q \
  "llama-cpp-python[server]==0.3.36" fastapi==0.165.0 uvicorn==0.54.0 sse-starlette==3.7.0 \
  starlette-context==0.3.6 pydantic-settings==2.16.3 >&2
eos="$(build/troupe inspect "$path" --no-tensors | sed -n 's/.*tokenizer.ggml.eos_token_id[^0-9]*\([0-9]*\).*/\1/p' | head -1),151643,151645"
seed=7
port=$((20000 + $$ % 20000))
for rate in $rates; do
  "$troupe" serve -m "$path" --listen "$endpoint" --threads "$threads" --kv-tokens 65536 --data-dir "$data" >"$log" 2>&1 &
  server=$!
  until grep -q "listening on" "$log"; do kill -0 $server || { cat "$log"; exit 1; }; sleep 0.1; done
  "$python" ops/bench/serve_load.py "$endpoint" poisson "$rate" "$requests" "$seed"
  kill -TERM $server; wait $server || true

  "$python" -m llama_cpp.server --model "$path" --n_threads "$threads" --n_threads_batch "$threads" \
    --n_ctx 4096 --n_batch 512 --interrupt_requests False --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
  server=$!
  until "$python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/v1/models', timeout=1)" 2>/dev/null; do
    kill -0 $server || { cat "$log"; exit 1; }; sleep 0.5
  done
  "$python" ops/bench/llama_server_load.py "http://127.0.0.1:$port" "$rate" "$requests" "$seed" "$eos"
  kill -TERM $server; wait $server || true
  seed=$((seed + 1))
done
