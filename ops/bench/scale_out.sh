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
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
model="${MODEL:-qwen2.5-coder-0.5b}" streams="${STREAMS:-32}" prompt="${PROMPT_TOKENS:-64}" gen="${GEN_TOKENS:-128}"
words="${SESSION_WORDS:-4000}" only="${ONLY:-all}"
bench_python_no_llama
path="$(bench_gguf "$model")"
bench_work scale
echo "cpu: $(bench_cpu), $(nproc) CPUs; model $model" >&2

worker() {  # NAME -> a one-thread worker on ipc://$work/NAME (its name in Stats: NAME)
  bench_spawn "$1" "$troupe" worker -m "$path" --listen "ipc://$work/$1" --threads 1 --kv-tokens 16384
  bench_ready "$1"
}
serve() {  # NAME [--flag=VALUE ...] WORKER... -> a front end on ipc://$work/NAME.sock
  local name=$1
  shift
  local flags=()
  for w in "$@"; do
    if [[ $w == --* ]]; then flags+=("$w"); else flags+=(--worker "ipc://$work/$w"); fi
  done
  bench_serve "$name" -m "$path" "${flags[@]}"
}

if [[ $only == all || $only == scaling ]]; then
worker a
serve one a
one="$("$python" ops/bench/serve_load.py "$endpoint" concurrent "$streams" "$prompt" "$gen")"
echo "$one"
bench_stop_all TERM
worker a
worker b
serve two a b
two="$("$python" ops/bench/serve_load.py "$endpoint" concurrent "$streams" "$prompt" "$gen")"
echo "$two"
echo "{\"placed\": $(bench_py scale-placed "$endpoint")}"
bench_stop_all TERM
bench_py scale-ratios "$one" "$two"
fi

if [[ $only == all || $only == failover ]]; then
worker a
worker b
serve fail a b
"$python" ops/bench/scale_out_bench.py failover "$endpoint" 16 "$prompt" "$gen" "${bench_pid[b]}"
bench_stop_all TERM
fi

if [[ $only == all || $only == session ]]; then
turn() { "$python" ops/bench/scale_out_bench.py turn "ipc://$work/$1.sock" "$2" "$3"; }
# Context: the session's ~4K tokens plus answers; pages leave memory after 1 s idle (b).
worker a
serve one --context=8192 --session-idle=1 a
turn one s "$words" >/dev/null
resident="$(turn one s 0)"
sleep 7  # the allocator's next sweep (every 5 s) finds it idle: its pages leave memory
restored="$(turn one s 0)"
bench_stop_all TERM
worker a
worker b
serve two --context=8192 a b
first="$(turn two moved "$words")"
home="$(echo "$first" | "$python" -c 'import json, sys; print(json.load(sys.stdin)["worker"])')"
bench_stop TERM "$home"  # its worker drains; the session's pages are in the store
sleep 3
moved="$(turn two moved 0)"
bench_stop_all TERM
cold='{}'
if [[ -n ${COLD:-} ]]; then  # minutes more: the whole history prefilled again
  worker a
  serve cold --context=8192 --no-kv-spill --session-idle=1 a
  turn cold cold "$words" >/dev/null
  sleep 7
  cold="$(turn cold cold 0)"
  bench_stop_all TERM
fi
bench_py scale-session "$resident" "$restored" "$moved" "$cold"
fi
