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
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
model="${MODEL:-qwen2.5-coder-0.5b}" threads="${THREADS:-2}" n="${SESSION_TOKENS:-4000}"
rate="${LAT_RATE:-0.5}" requests="${LAT_REQUESTS:-16}" items="${JOB_ITEMS:-30}" phases="${PHASES:-session latency}"
python="$(ops/python-env.sh)"
path="$(ops/models.sh --path "$model")"
troupe="${BUILD_DIR:-$root/build}/troupe"
export PYTHONPATH="${BUILD_DIR:-$root/build}/python:$root/clients/python:$root/ops/bench"
work="$(mktemp -d -t troupe-bench-sessions.XXXXXX)"
ep="ipc://$work/s.sock"
server=""
trap '[ -n "$server" ] && kill -9 $server 2>/dev/null; rm -rf "$work"' EXIT
start() {  # start DATA_DIR [flags...]
  local data="$1"
  shift
  "$troupe" serve -m "$path" --listen "$ep" --threads "$threads" --kv-tokens 16384 --context 8192 \
    --data-dir "$data" "$@" >>"$work/serve.log" 2>&1 &
  server=$!
  until grep -q "listening on" "$work/serve.log"; do kill -0 $server || { cat "$work/serve.log"; exit 1; }; sleep 0.1; done
  : >"$work/serve.log.mark"
}
stop() { kill "-$1" $server; wait $server 2>/dev/null || true; server=""; }
bench() { "$python" ops/bench/sessions_bench.py "$ep" "$@"; }

if [[ " $phases " == *" session "* ]]; then
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

"$python" - "$work" "$path" "$store_bytes" "$troupe" "$codec" <<'PY'
import json, re, subprocess, sys
work, path, store_bytes, troupe = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
first, restored, recomputed = (json.load(open(f"{work}/{p}.json")) for p in ("first", "restored", "recomputed"))
log = open(f"{work}/serve.log").read()
rates = {}
for verb, pages, mib, ms in re.findall(r"kv: session '\w+' (wrote|read) (\d+) pages \(([\d.]+) MiB\) in ([\d.]+) ms", log):
    rates[verb] = (int(pages), float(mib), float(ms))
info = subprocess.run([troupe, "inspect", path, "--no-tensors"], capture_output=True, text=True).stdout
def meta(key):
    m = re.search(rf"\.{key}\D*(\d+)", info)
    return int(m.group(1)) if m else 0
layers, heads, kv_heads, embd = meta("block_count"), meta("attention.head_count"), meta("attention.head_count_kv"), meta("embedding_length")
fp16_per_token = layers * 2 * kv_heads * (embd // heads) * 2
spilled_tokens = first["pages_spilled"] * 16
codec_per_token = (rates["wrote"][1] * (1 << 20) / (rates["wrote"][0] * 16)) if "wrote" in rates else float("nan")
out = {
    "codec": sys.argv[5],
    "session_prompt_tokens": restored["prompt_tokens"],
    "ttft_ms_restored": restored["ttft_ms"], "ttft_ms_recomputed": recomputed["ttft_ms"],
    "restore_speedup": round(recomputed["ttft_ms"] / restored["ttft_ms"], 2),
    "restored_prompt_tokens": restored["cached_prompt_tokens"], "same_greedy_tokens": recomputed["same_tokens"],
    "spill_mib_s": round(rates["wrote"][1] / rates["wrote"][2] * 1000, 1) if "wrote" in rates else None,
    "restore_read_mib_s": round(rates["read"][1] / rates["read"][2] * 1000, 1) if "read" in rates else None,
    "fp16_kv_bytes_per_token": fp16_per_token,
    "spilled_bytes_per_token": round(codec_per_token, 1),
    "store_bytes_per_token": round(store_bytes / spilled_tokens, 1) if spilled_tokens else None,
    "stored_vs_fp16": round(store_bytes / spilled_tokens / fp16_per_token, 3) if spilled_tokens else None,
}
print(json.dumps(out))
PY
fi

if [[ " $phases " == *" latency "* ]]; then
echo "== interactive latency, alone and beside a $items-item batch job" >&2
# The same seeded requests twice, each on a fresh server (no prefix cached from the other run).
start "$work/lat"
bench latency "$rate" "$requests" 3 | tee "$work/alone.json"
stop TERM
start "$work/lat-job"
bench latency "$rate" "$requests" 3 "$items" | tee "$work/job.json"
stop TERM
"$python" - "$work" <<'PY'
import json, sys
a, j = (json.load(open(f"{sys.argv[1]}/{p}.json")) for p in ("alone", "job"))
print(json.dumps({"interactive_ttft_p99_ratio_with_job": round(j["ttft_ms_p99"] / a["ttft_ms_p99"], 2),
                  "interactive_per_token_p99_ratio_with_job": round(j["per_token_ms_p99"] / a["per_token_ms_p99"], 2),
                  "job_items_done_meanwhile": j["job_items_done_meanwhile"]}))
PY
fi
