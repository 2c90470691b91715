#!/usr/bin/env bash
# 16 concurrent streams over HTTP/SSE against the same over ZeroMQ, on one
# `troupe serve --http` with the default model, and the same streams through
# llama.cpp's llama-server on the same GGUF file (ops/bench/http_vs_zmq.py).
#   ops/bench/http.sh [STREAMS=16] [TOKENS=128] [ROUNDS=3]
# THREADS (2) for both servers; PEER=0 leaves llama-server out (it is built
# once by ops/llama-tools.sh, ~15 min on 2 cores).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="$("$root/ops/python-env.sh")"
troupe="$root/build/troupe"
model="${MODEL:-qwen2.5-coder-0.5b}"
work="$(mktemp -d)"
threads="${THREADS:-2}"
streams="${1:-16}" tokens="${2:-128}"
pid="" peer_pid=""
trap 'kill $pid $peer_pid 2>/dev/null || true; wait $pid $peer_pid 2>/dev/null || true; rm -rf "$work"' EXIT
port=$((18000 + RANDOM % 2000))
"$troupe" serve -m "$model" --listen "ipc://$work/s.sock" --http "127.0.0.1:$port" --data-dir "$work/data" \
  --kv-tokens 16384 --threads "$threads" >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 600); do curl -sf "127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
peer=""
if [ "${PEER:-1}" != 0 ]; then
  bin="$("$root/ops/llama-tools.sh")"
  gguf="$("$root/ops/models.sh" --path "$model")"  # the file `troupe serve -m $model` reads
  peer_port=$((port + 1))
  # One slot per stream, each with room for its prompt and tokens; continuous batching is its default.
  "$bin/llama-server" -m "$gguf" -t "$threads" -np "$streams" -c $((streams * (tokens + 64))) \
    --host 127.0.0.1 --port "$peer_port" >"$work/peer.log" 2>&1 &
  peer_pid=$!
  for _ in $(seq 1200); do curl -sf "127.0.0.1:$peer_port/health" >/dev/null && break; sleep 0.1; done
  curl -sf "127.0.0.1:$peer_port/health" >/dev/null || { cat "$work/peer.log" >&2; exit 1; }
  peer="127.0.0.1:$peer_port"
  echo "peer: llama-server $(basename "$(dirname "$(dirname "$bin")")") on $gguf, -t $threads -np $streams"
fi
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) threads"
PYTHONPATH="$root/build/python:$root/clients/python" "$py" "$root/ops/bench/http_vs_zmq.py" \
  "ipc://$work/s.sock" "127.0.0.1:$port" "$streams" "$tokens" "${3:-3}" $peer
