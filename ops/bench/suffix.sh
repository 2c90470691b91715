#!/usr/bin/env bash
# Suffix speculation on work that repeats itself (docs/BENCHMARKS.md,
# "Suffix speculation"): one server per mode (off, ngram, suffix, auto), so
# each mode's history starts empty, and in each the same sequence of
# requests, one at a time (batch 1):
#   job:  the ten papers of examples/summarize-papers, each summarized under
#         one fixed instruction and format (a nightly job's shape: item k
#         drafts from items 1..k-1 in suffix and auto);
#   chat: ten different open questions (history cannot help: the control).
# Greedy, TOKENS tokens each. Prints per workload and mode the decode tok/s
# over requests 2..10 (the first has no history), the ratio to off, and
# whether every answer's tokens equal off's.
# Env: MODEL (qwen2.5-coder-0.5b), THREADS (2), TOKENS (128), MAX_DRAFT (8),
# WORKLOADS ("job chat").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
model="${MODEL:-qwen2.5-coder-0.5b}" threads="${THREADS:-2}" n="${TOKENS:-128}" k="${MAX_DRAFT:-8}"
bench_python
path="$(bench_gguf "$model")"
bench_work suffix
echo "== $model, $threads threads, $n greedy tokens a request; $(bench_cpu_line); commit $(bench_commit)"
for w in ${WORKLOADS:-job chat}; do
  for mode in off ngram suffix auto; do
    bench_serve "serve-$w-$mode" -m "$path" --threads "$threads" --kv-tokens 16384 --context 8192
    "$python" ops/bench/suffix_bench.py "$endpoint" "$w" "$mode" "$n" "$k" >>"$work/rows.jsonl"
    bench_stop TERM
  done
done
"$python" ops/bench/suffix_bench.py --summary "$work/rows.jsonl"
