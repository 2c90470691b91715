#!/usr/bin/env bash
# One client floods, another is polite (docs/RELIABILITY.md, "Flood"):
# FLOOD prompts of 1 MiB from one connection against `troupe serve` on the
# default model, while a second connection pings every 20 ms and asks a short
# question every 0.5 s. Prints the polite client's Ping and TTFT p50/p99, how
# every flood request ended (none may be lost), and the server's peak RSS.
# MODE=slots: the flood is FLOOD ordinary prompts that take every running
# slot, the queue and the KV pages; the polite client's TTFT is set beside
# the server's step time (the fair-share target).
# Env: MODEL (qwen2.5-coder-0.5b), THREADS (2), FLOOD (1000), MODE (bytes|slots).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_python
path="$(bench_gguf "${MODEL:-qwen2.5-coder-0.5b}")"
bench_work flood
echo "cpu: $(bench_cpu), threads ${THREADS:-2}, model $path"
bench_serve serve -m "$path" --threads "${THREADS:-2}"
"$python" ops/bench/flood_bench.py "$endpoint" "$server" "${FLOOD:-1000}" "${MODE:-bytes}"
