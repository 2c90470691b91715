#!/usr/bin/env bash
# Suffix speculation on work that repeats itself (docs/BENCHMARKS.md,
# "Suffix speculation"): one server per workload and mode (off, ngram,
# suffix, auto), so each mode's history starts empty, running one workload
# of ops/bench/suffix_workloads.py (its docstring names their sources):
#   job     50 paper excerpts summarized as JSON records under one schema, one
#           batch job, one item at a time (serve --job-concurrency 1);
#   job16   the same job, 16 items at a time (speculation must not cost under load);
#   coding  a 40-turn session over one file (--context 8192, window);
#   agent   30 tool calls of a travel-planning loop, the conversation resent each time;
#   chat    20 unrelated open questions (the control).
# Greedy, TOKENS tokens at most a request. Prints a row per workload and
# mode: tok/s, the ratio to off and to the best of off and ngram, acceptance
# per source, whether every answer equals off's, the trees' tokens and bytes
# a token (`troupe stats`). How each rate is taken: suffix_bench.py.
# Env: MODEL (qwen2.5-coder-1.5b), THREADS (2), TOKENS (128), MAX_DRAFT (8),
# WORKLOADS ("job coding agent chat job16"), MODES ("off ngram suffix auto").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
model="${MODEL:-qwen2.5-coder-1.5b}" threads="${THREADS:-2}" n="${TOKENS:-128}" k="${MAX_DRAFT:-8}"
bench_python
path="$(bench_gguf "$model")"
bench_work suffix
echo "== $model, $threads threads, at most $n greedy tokens a request; $(bench_cpu_line); commit $(bench_commit)"
for w in ${WORKLOADS:-job coding agent chat job16}; do
  concurrency=1
  [ "$w" = job16 ] && concurrency=16
  for mode in ${MODES:-off ngram suffix auto}; do
    bench_serve "serve-$w-$mode" -m "$path" --threads "$threads" --kv-tokens 32768 --context 8192 \
      --speculation "$mode" --max-draft "$k" --job-concurrency "$concurrency"
    PYTHONPATH="$root/ops/bench${PYTHONPATH:+:$PYTHONPATH}" \
      "$python" ops/bench/suffix_bench.py "$endpoint" "$w" "$mode" "$n" "$k" >>"$work/rows.jsonl"
    bench_stop TERM
  done
done
"$python" ops/bench/suffix_bench.py --summary "$work/rows.jsonl"
[ -z "${OUT:-}" ] || cp "$work/rows.jsonl" "$OUT"
