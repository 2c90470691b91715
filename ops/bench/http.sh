#!/usr/bin/env bash
# 16 concurrent streams over HTTP/SSE against the same over ZeroMQ, on one
# `troupe serve --http` with the default model, and the same streams through
# llama.cpp's llama-server on the same GGUF file (ops/bench/http_vs_zmq.py).
#   ops/bench/http.sh [STREAMS=16] [TOKENS=128] [ROUNDS=3]
# THREADS (2) for both servers; PEER=0 leaves llama-server out (it is built
# once by ops/llama-tools.sh, ~15 min on 2 cores).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_python
model="${MODEL:-qwen2.5-coder-0.5b}"
gguf="$(bench_gguf "$model")"  # the file `troupe serve -m $model` reads
threads="${THREADS:-2}"
streams="${1:-16}" tokens="${2:-128}"
bench_work http
port="$(bench_port)"
bench_serve serve -m "$model" --http "127.0.0.1:$port" --kv-tokens 16384 --threads "$threads"
peer=""
if [ "${PEER:-1}" != 0 ]; then
  bench_llama_tools
  peer_port="$(bench_port)"
  # One slot per stream, each with room for its prompt and tokens; continuous batching is its default.
  bench_llama_server peer "$gguf" "$peer_port" -t "$threads" -np "$streams" -c $((streams * (tokens + 64)))
  peer="127.0.0.1:$peer_port"
  echo "peer: llama-server $llama_release on $gguf, -t $threads -np $streams"
fi
echo "CPU: $(bench_cpu), $(nproc) threads"
"$python" ops/bench/http_vs_zmq.py "$endpoint" "127.0.0.1:$port" "$streams" "$tokens" "${3:-3}" ${peer:+"$peer"}
