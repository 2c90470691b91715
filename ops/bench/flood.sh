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
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
python="$(ops/python-env.sh)"
path="$(ops/models.sh --path "${MODEL:-qwen2.5-coder-0.5b}")"
troupe="${BUILD_DIR:-$root/build}/troupe"
[ -x "$troupe" ] || ops/build.sh
export PYTHONPATH="${BUILD_DIR:-$root/build}/python:$root/clients/python:$root/ops/bench"
work="$(mktemp -d -t troupe-bench-flood.XXXXXX)"
server=""
trap '[ -n "$server" ] && kill -9 $server 2>/dev/null; rm -rf "$work"' EXIT
echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), threads ${THREADS:-2}, model $path"
"$troupe" serve -m "$path" --threads "${THREADS:-2}" --listen "ipc://$work/s.sock" --data-dir "$work/data" \
  >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 600); do grep -q "listening on" "$work/serve.log" && break; sleep 0.1; done
grep -q "listening on" "$work/serve.log" || { cat "$work/serve.log" >&2; exit 1; }
"$python" ops/bench/flood_bench.py "ipc://$work/s.sock" "$server" "${FLOOD:-1000}" "${MODE:-bytes}"
