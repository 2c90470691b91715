#!/usr/bin/env bash
# Data-parallel workers (docs/SCALE_OUT.md) on the default model:
#   1. scaling: STREAMS concurrent streams through one `troupe serve` in front
#      of one `troupe worker` of one thread, then of two such workers (this
#      machine's two cores): aggregate decode tok/s and the ratio two/one,
#      the peer being troupe's own single worker in the same run;
#   2. failover: 16 streams on two workers, one killed with SIGKILL mid-stream:
#      whether every stream finished, and how long the moved streams stalled
#      (their longest gap between tokens) against their usual inter-token time;
#   3. a session's move: a session of SESSION_WORDS (~4K tokens) whose next
#      turn runs (a) with its pages still in its worker's memory, (b) restored
#      from the store on the same worker after they left memory (--session-idle),
#      (c) restored on the other worker after its own worker drained (SIGTERM),
#      and (d) with COLD=1, recomputed, with no stored pages (--no-kv-spill): the
#      next turn's time to first token; the peer is (b), the local restore, in the
#      same run.
# Env: MODEL (qwen2.5-coder-0.5b), STREAMS (32), PROMPT_TOKENS (64), GEN_TOKENS (128),
#      SESSION_WORDS (4000), ONLY (all; or scaling, failover, session).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
model="${MODEL:-qwen2.5-coder-0.5b}" streams="${STREAMS:-32}" prompt="${PROMPT_TOKENS:-64}" gen="${GEN_TOKENS:-128}"
words="${SESSION_WORDS:-4000}" only="${ONLY:-all}"
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
serve() {  # NAME [--flag=VALUE ...] WORKER... -> a front end on ipc://$work/NAME
  local name=$1
  shift
  local flags=()
  for w in "$@"; do
    if [[ $w == --* ]]; then flags+=("$w"); else flags+=(--worker "ipc://$work/$w"); fi
  done
  "$troupe" serve -m "$path" --listen "ipc://$work/$name" --data-dir "$work/$name.data" "${flags[@]}" \
    >"$work/$name.log" 2>&1 &
  pids+=($!)
  eval "pid_$name=$!"
  wait_for "$work/$name.log" $!
}
stop_all() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }

if [[ $only == all || $only == scaling ]]; then
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
fi

if [[ $only == all || $only == failover ]]; then
worker a
worker b
serve fail a b
# shellcheck disable=SC2154  # pid_b is set by worker()
"$python" ops/bench/scale_out_bench.py failover "ipc://$work/fail" 16 "$prompt" "$gen" "$pid_b"
stop_all
fi

if [[ $only == all || $only == session ]]; then
turn() { "$python" ops/bench/scale_out_bench.py turn "ipc://$work/$1" "$2" "$3"; }
# Context: the session's ~4K tokens plus answers; pages leave memory after 1 s idle (b).
worker a
serve one --context=8192 --session-idle=1 a
turn one s "$words" >/dev/null
resident="$(turn one s 0)"
sleep 7  # the allocator's next sweep (every 5 s) finds it idle: its pages leave memory
restored="$(turn one s 0)"
stop_all
worker a
worker b
serve two --context=8192 a b
first="$(turn two moved "$words")"
home="$(echo "$first" | "$python" -c 'import json, sys; print(json.load(sys.stdin)["worker"])')"
pid_var="pid_$home"
kill -TERM "${!pid_var}"  # its worker drains; the session's pages are in the store
sleep 3
moved="$(turn two moved 0)"
stop_all
cold='{}'
if [[ -n ${COLD:-} ]]; then  # minutes more: the whole history prefilled again
  worker a
  serve cold --context=8192 --no-kv-spill --session-idle=1 a
  turn cold cold "$words" >/dev/null
  sleep 7
  cold="$(turn cold cold 0)"
  stop_all
fi
"$python" - "$resident" "$restored" "$moved" "$cold" <<'PY'
import json, sys
names = ("resident in memory", "restored locally", "moved to the other worker", "recomputed")
rows = [json.loads(a) for a in sys.argv[1:5] if a != "{}"]
peer = rows[1]["first_token_ms"]
for name, r in zip(names, rows):
    print(f"{name}: first token {r['first_token_ms']} ms ({r['first_token_ms'] / peer:.2f}x the local restore), "
          f"{r['cached_prompt_tokens']} of {r['prompt_tokens']} prompt tokens from cache, worker {r['worker']}")
PY
fi
