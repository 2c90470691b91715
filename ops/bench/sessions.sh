#!/usr/bin/env bash
# Sessions and jobs on the default model (docs/BENCHMARKS.md, "Sessions"):
#   1. TTFT of the next turn of a long session (SESSION_TOKENS, ~4,000)
#      after kill -9 and a restart, its prefix restored from spilled pages,
#      against the same conversation prefilled from scratch on a server that
#      stores no KV (the recompute every other server does) — same run,
#      same machine; and whether both answer the same greedy tokens;
#   2. spill and restore throughput of the store (the server's kv: lines),
#      and bytes per token stored against FP16 KV;
#   3. interactive latency (Poisson, LAT_REQUESTS at LAT_RATE) alone and with
#      a JOB_ITEMS-item batch job running.
# Env: MODEL (qwen2.5-coder-0.5b), THREADS (2), SESSION_TOKENS (4000),
# LAT_RATE (0.5), LAT_REQUESTS (16), JOB_ITEMS (30), PHASES ("session latency"),
# KV_CODEC (auto: k8v4, 4-bit values; int8).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
model="${MODEL:-qwen2.5-coder-0.5b}" threads="${THREADS:-2}" n="${SESSION_TOKENS:-4000}"
rate="${LAT_RATE:-0.5}" requests="${LAT_REQUESTS:-16}" items="${JOB_ITEMS:-30}" phases="${PHASES:-session latency}"
bench_python
path="$(bench_gguf "$model")"
bench_work sessions
# Every server under one name: one endpoint, one log ($work/serve.log, read for the kv: lines).
start() {  # start DATA_DIR [flags...]
  local data="$1"
  shift
  bench_serve serve -m "$path" --threads "$threads" --kv-tokens 16384 --context 8192 --data-dir "$data" "$@"
}
stop() { bench_stop "$1"; }
bench() { "$python" ops/bench/sessions_bench.py "$endpoint" "$@"; }

if bench_in "$phases" session; then
echo "== $model, $threads threads, a $n-token session, ${KV_CODEC:-auto} pages" >&2
codec="${KV_CODEC:-auto}"
start "$work/data" --kv-spill-codec "$codec"
bench first "$n" | tee "$work/first.json"
stop 9                                   # kill -9: the spilled pages must survive it
start "$work/data" --kv-spill-codec "$codec"
bench resume "$work/conversation.json" | tee "$work/restored.json"
stop TERM                                # a clean stop flushes the memtables: the store's size on disk is final
store_bytes=$(du -sb "$work/data" | cut -f1)
start "$work/fresh" --no-kv-spill
bench recompute "$work/conversation.json" | tee "$work/recomputed.json"
stop TERM
grep "kv: session" "$work/serve.log" >&2 || true
bench_py sessions-restore "$work" "$path" "$store_bytes" "$troupe" "$codec"
fi

if bench_in "$phases" latency; then
echo "== interactive latency, alone and beside a $items-item batch job" >&2
# The same seeded requests twice, each on a fresh server (no prefix cached from the other run).
start "$work/lat"
bench latency "$rate" "$requests" 3 | tee "$work/alone.json"
stop TERM
start "$work/lat-job"
bench latency "$rate" "$requests" 3 "$items" | tee "$work/job.json"
stop TERM
bench_py sessions-latency "$work"
fi
