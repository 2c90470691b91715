#!/usr/bin/env bash
# Speculative decoding on the model pair (qwen2.5-coder-1.5b, with
# qwen2.5-coder-0.5b as its draft model), one stream (`troupe generate`),
# three workloads: summarization (the ten papers of examples/summarize-papers,
# summarized), code (rewrite a 40-line Python file with docstrings: the
# output copies the input), free chat (a story). Modes: off, ngram, draft,
# auto; greedy, 128 tokens. Prints decode tok/s per mode, the speed-up over off,
# acceptance and mean accepted length, and whether the tokens are identical
# to off's. Then the service (`troupe serve`, verify windows in the batched
# step): 1 and 16 concurrent streams per workload and mode, aggregate decode
# tok/s (ops/bench/spec_serve.py).
# Env: MODEL (qwen2.5-coder-1.5b), DRAFT (qwen2.5-coder-0.5b; empty: no draft
# model, no draft mode), THREADS (2), TOKENS (128), MAX_DRAFT (8),
# SERVICE_STREAMS ("1 16"), PHASES ("engine service"), WORKLOADS, REPEAT (3
# rounds; each mode's best is reported).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
model="${MODEL:-qwen2.5-coder-1.5b}" draft="${DRAFT-qwen2.5-coder-0.5b}" threads="${THREADS:-2}" n="${TOKENS:-128}" k="${MAX_DRAFT:-8}"
path="$(bench_gguf "$model")"
modes="off ngram auto" draft_flags=()
if [ -n "$draft" ]; then
  modes="off ngram draft auto"
  draft_flags=(--draft-model "$(bench_gguf "$draft")")
fi
source "$(dirname "${BASH_SOURCE[0]}")/spec/prompts.sh"  # read from the root
phases="${PHASES:-engine service}"
rounds="${REPEAT:-3}"
bench_work spec
raw="$work/raw.jsonl"
# Best of the rounds per mode (the machine is shared: runs of the same mode
# vary by 10-20 %), with rounds interleaving the modes so that drift hits
# them alike; the speed-up is against the best `off`, and the tokens must be
# the same as off's in every round (benchlib.py spec-best).
if bench_in "$phases" engine; then
: >"$raw"
for w in ${WORKLOADS:-summarization code chat}; do
  base_ids=""
  for round in $(seq "$rounds"); do
    for mode in $modes; do
      out="$("$troupe" generate -m "$path" --threads "$threads" --chat "${prompts[$w]}" -n "$n" -t 0 --print-ids \
             --context 8192 --speculation "$mode" --max-draft "$k" "${draft_flags[@]}" 2>"$work/generate.err")"
      stats="$(cat "$work/generate.err")"
      rate="$(sed -n 's/.* \([0-9.]*\) tok\/s decode.*/\1/p' <<<"$stats")"
      acc="$(sed -n 's/.*accepted (\([0-9]*\)%), \([0-9.]*\) per window.*/\1 \2/p' <<<"$stats")"
      if [ "$mode" = off ] && [ -z "$base_ids" ]; then base_ids="$out"; fi
      same=0
      if [ "$out" = "$base_ids" ]; then same=1; fi
      bench_py spec-engine-row "$w" "$mode" "$round" "$rate" "$acc" "$same" >>"$raw"
    done
  done
done
bench_py spec-best "$raw" decode_tok_s
fi

if bench_in "$phases" service; then
bench_python
bench_serve serve -m "$path" --threads "$threads" --kv-tokens 32768 --context 8192 "${draft_flags[@]}"
: >"$raw"
for w in ${WORKLOADS:-summarization code chat}; do
  printf '%s' "${prompts[$w]}" >"$work/$w.txt"
  for streams in ${SERVICE_STREAMS:-1 16}; do
    off=""
    for round in $(seq "$rounds"); do
      for mode in $modes; do
        line="$("$python" ops/bench/spec_serve.py "$endpoint" "$work/$w.txt" "$streams" "$mode" "$n")"
        [ -z "$off" ] && [ "$mode" = off ] && off="$line"
        bench_py spec-service-row "$w" "$round" "$line" "$off" >>"$raw"
      done
    done
  done
done
bench_py spec-best "$raw" aggregate_decode_tok_s
fi
