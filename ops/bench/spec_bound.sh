#!/usr/bin/env bash
# The ceiling of n-gram speculation on this machine, per workload: the
# target's greedy output replayed against prompt lookup, each step priced by
# `troupe bench` on the same model and context (ops/bench/spec_bound.py).
# The prompt is formatted as `troupe generate --chat` formats it for Qwen
# models (ChatML with the default system turn).
# Env: MODEL (qwen2.5-coder-1.5b), THREADS (2), TOKENS (128), WORKLOADS
# ("summarization code chat").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
model="${MODEL:-qwen2.5-coder-1.5b}" threads="${THREADS:-2}" n="${TOKENS:-128}"
path="$(bench_gguf "$model")"
source "$(dirname "${BASH_SOURCE[0]}")/spec/prompts.sh"  # read from the root
bench_work spec-bound
for w in ${WORKLOADS:-summarization code chat}; do
  "$troupe" generate -m "$path" --threads "$threads" --chat "${prompts[$w]}" -n "$n" -t 0 --print-ids \
    --context 8192 --quiet >"$work/output"
  # The prompt as generate formats it: ChatML with Qwen's default system turn.
  printf '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' \
    "${prompts[$w]}" | "$troupe" tokenize -m "$path" --special >"$work/prompt"
  context=$(wc -w <"$work/prompt")
  "$troupe" bench -m "$path" --threads "$threads" --batch 1 2 3 4 5 6 7 8 9 --prompt-tokens "$context" \
    --gen-tokens 8 --repeat 1 2>/dev/null | bench_py step-costs >"$work/costs"
  echo "$w: prompt $context tokens, step ms by tokens $(cat "$work/costs")"
  python3 ops/bench/spec_bound.py "$work/prompt" "$work/output" "$work/costs"
done
