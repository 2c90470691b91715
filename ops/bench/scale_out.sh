#!/usr/bin/env bash
# Data-parallel workers (docs/SCALE_OUT.md) on the default model:
#   1. scaling: STREAMS concurrent streams through one `troupe serve` in front
#      of one `troupe worker` of one thread, then of two such workers (this
#      machine's two cores): aggregate decode tok/s and the ratio two/one,
#      the peer being troupe's own single worker in the same run;
#   2. failover: 16 streams on two workers, one killed with SIGKILL mid-stream:
#      whether every stream finished, and how long the moved streams stalled
#      (their longest gap between tokens) against their usual inter-token time.
# Env: MODEL (qwen2.5-coder-0.5b), STREAMS (32), PROMPT_TOKENS (64), GEN_TOKENS (128).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
model="${MODEL:-qwen2.5-coder-0.5b}" streams="${STREAMS:-32}" prompt="${PROMPT_TOKENS:-64}" gen="${GEN_TOKENS:-128}"
troupe="${BUILD_DIR:-$root/build}/troupe"
[ -x "$troupe" ] || ops/build.sh
python="$(ops/python-env.sh --no-llama)"
path="$(ops/models.sh --path "$model")"
export PYTHONPATH="${BUILD_DIR:-$root/build}/python:$root/clients/python:$root/ops/bench"
work="$(mktemp -d -t troupe-bench-scale.XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
echo "cpu: $(lscpu | sed -n 's/^Model name:\s*//p' | head -1), $(nproc) CPUs; model $model" >&2

wait_for() {  # LOG PID
  until grep -qs "listening on" "$1"; do kill -0 "$2" 2>/dev/null || { cat "$1" >&2; exit 1; }; sleep 0.1; done
}
worker() {  # NAME -> starts a one-thread worker on ipc://$work/NAME
  "$troupe" worker -m "$path" --listen "ipc://$work/$1" --threads 1 --kv-tokens 16384 >"$work/$1.log" 2>&1 &
  pids+=($!)
  eval "pid_$1=$!"
  wait_for "$work/$1.log" $!
}
serve() {  # NAME WORKER... -> a front end on ipc://$work/NAME
  local name=$1
  shift
  local flags=()
  for w in "$@"; do flags+=(--worker "ipc://$work/$w"); done
  "$troupe" serve -m "$path" --listen "ipc://$work/$name" --data-dir "$work/$name.data" "${flags[@]}" \
    >"$work/$name.log" 2>&1 &
  pids+=($!)
  eval "pid_$name=$!"
  wait_for "$work/$name.log" $!
}
stop_all() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }

worker a
serve one a
one="$("$python" ops/bench/serve_load.py "ipc://$work/one" concurrent "$streams" "$prompt" "$gen")"
echo "$one"
stop_all
worker a
worker b
serve two a b
two="$("$python" ops/bench/serve_load.py "ipc://$work/two" concurrent "$streams" "$prompt" "$gen")"
echo "$two"
placed="$("$python" -c 'import json, sys
from troupe_client import Client
with Client(sys.argv[1]) as c:
    print(json.dumps([{"worker": w["endpoint"].rsplit("/", 1)[-1], "requests": w["requests"], "tokens": w["tokens"],
                       "step_ms": round(w["step_ms"], 1)} for w in c.stats()["workers"]]))' "ipc://$work/two")"
echo "{\"placed\": $placed}"
stop_all
"$python" - "$one" "$two" <<'PY'
import json, sys
one, two = (json.loads(a) for a in sys.argv[1:3])
for key in ("aggregate_decode_tok_s", "all_decoding_tok_s", "output_tok_s_wall"):
    a, b = one[key], two[key]
    print(f"{key}: one worker {a}, two workers {b}: {b / a:.2f}x" if a and b else f"{key}: n/a")
PY

worker a
worker b
serve fail a b
# shellcheck disable=SC2154  # pid_b is set by worker()
"$python" ops/bench/scale_out_bench.py failover "ipc://$work/fail" 16 "$prompt" "$gen" "$pid_b"
stop_all
