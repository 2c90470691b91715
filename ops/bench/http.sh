#!/usr/bin/env bash
# 16 concurrent streams over HTTP/SSE against the same over ZeroMQ, on one
# `troupe serve --http` with the default model (ops/bench/http_vs_zmq.py).
#   ops/bench/http.sh [STREAMS=16] [TOKENS=128] [ROUNDS=3]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="$("$root/ops/python-env.sh")"
troupe="$root/build/troupe"
model="${MODEL:-qwen2.5-coder-0.5b}"
work="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
port=$((18000 + RANDOM % 2000))
"$troupe" serve -m "$model" --listen "ipc://$work/s.sock" --http "127.0.0.1:$port" --data-dir "$work/data" \
  --kv-tokens 16384 >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 600); do curl -sf "127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) threads"
PYTHONPATH="$root/build/python:$root/clients/python" "$py" "$root/ops/bench/http_vs_zmq.py" \
  "ipc://$work/s.sock" "127.0.0.1:$port" "${1:-16}" "${2:-128}" "${3:-3}"
