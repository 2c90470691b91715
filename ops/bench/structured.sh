#!/usr/bin/env bash
# Constrained decoding (docs/STRUCTURED_OUTPUT.md) against llama.cpp's llama-server, in one run
# on one machine: the same GGUF file, the same threads, greedy (ops/bench/structured_bench.py).
#
#   ops/bench/structured.sh [JSONSCHEMABENCH_DIR]
#
# Parts (PARTS, comma-separated; default all):
#   coverage    ops/bench/schema_coverage.py, when present: how many JSONSchemaBench schemas
#               troupe and llama.cpp's converter take (all of them; COVERAGE_LIMIT=K: the first
#               K of each subset; SUBSETS applies; COVERAGE_LLAMA=0: troupe only)
#   compliance  N schemas per JSONSchemaBench subset (a seeded choice among those troupe
#               compiles), "a JSON instance of this schema" from each server with the schema as
#               the constraint: compiled, finished, valid (jsonschema), compliance = valid/finished
#   timing      `troupe grammar` per schema (wall: conversion + compile + process) and its masks:
#               the first, and one per token of troupe's valid outputs (first time, cached)
#   decode      ZeroMQ, constrained (8-12 records) against unconstrained decode tok/s, per
#               model, per BATCHES (targets: >= 0.95 at 1 stream, >= 0.9 at 16)
#   jump        `serve` against `serve --no-jump-forward`: tok/s, steps, identical outputs
#               (decode and jump repeat their prompts: their servers run --speculation off
#               unless TROUPE_FLAGS names a mode)
#   peer        troupe against llama-server, HTTP chat with response_format json_schema,
#               per model, per BATCHES (target: >= 2x); each round asks for other records
#               (troupe as served: by default greedy requests speculate with auto)
#
# JSONSchemaBench: a checkout (`git clone https://github.com/guidance-ai/jsonschemabench`) or a
# git repository of it, bare too; the argument, else JSONSCHEMABENCH, else ./jsonschemabench.
#
# Env: PARTS, MODELS (qwen2.5-coder-0.5b,qwen2.5-coder-1.5b), COMPLIANCE_MODEL (the first),
# N (8 per subset), SUBSETS (all, or e.g. Github_easy,Kubernetes), SEED (0), MAX_TOKENS (512),
# PROMPT_CHARS (6000: the schema in the prompt is cut there; the constraint is whole),
# COMPLIANCE_STREAMS (4 requests at a time, per server), BATCHES (1,16), ROUNDS (3),
# DECODE_MAX_TOKENS (512), JUMP_KINDS (schema,gbnf), JUMP_PROMPTS (3), JUMP_MAX_TOKENS (600),
# THREADS (2), KV_TOKENS (32768), TROUPE_FLAGS (more `troupe serve` flags for every troupe
# server, e.g. "--speculation ngram"), PEER (1; 0 leaves llama-server out: it is built once by
# ops/llama-tools.sh, ~15 min on 2 cores), PEER_CTX_PER_SLOT (8192), OUT (raw JSON lines and
# outputs; default a new dir under /tmp).
#
# The full run is long on 2 cores (an hour or two: 80 schemas twice, then per model 16 streams,
# jump-forward and the peer). A look in a few minutes (figures from it are not results):
#   N=1 SUBSETS=Github_easy,Glaiveai2K COVERAGE_LIMIT=3 MODELS=qwen2.5-coder-0.5b BATCHES=1 ROUNDS=1 \
#     MAX_TOKENS=256 DECODE_MAX_TOKENS=160 JUMP_PROMPTS=1 JUMP_MAX_TOKENS=200 ops/bench/structured.sh
set -euo pipefail
bench="${1:-${JSONSCHEMABENCH:-}}"
if [ -n "$bench" ]; then bench="$(cd "$bench" && pwd)"; fi  # the library moves to the repository's root
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_python
models="${MODELS:-qwen2.5-coder-0.5b,qwen2.5-coder-1.5b}"
parts="${PARTS:-coverage,compliance,timing,decode,jump,peer}"
export MODELS="$models" PARTS="$parts"

if [ -z "$bench" ] && [ -e jsonschemabench ]; then bench="$root/jsonschemabench"; fi
if [[ ",$parts," =~ ,(coverage|compliance|timing), ]] && [ -z "$bench" ]; then
  echo "JSONSchemaBench not found: git clone https://github.com/guidance-ai/jsonschemabench and give its path" >&2
  exit 1
fi

ggufs=""
IFS=, read -ra names <<<"$models"
for m in "${names[@]}"; do
  ggufs+="${ggufs:+,}$(bench_gguf "$m")"  # installed once; the file `troupe serve -m $m` reads
done

llama="" version=""
if [ "${PEER:-1}" != 0 ] && [[ ",$parts," =~ ,(compliance|peer), ]]; then
  bench_llama_tools
  llama="$llama_bin/llama-server"
  version="$llama_release ($("$llama" --version 2>&1 | grep -m1 -i version | xargs))"
fi

cpu="$(bench_cpu_line)"
echo "$cpu"
echo "troupe: $troupe ($(bench_commit), working tree as is)"
echo "peer: ${llama:-none}${version:+ $version}"
echo "models: $models ($ggufs); threads ${THREADS:-2}; JSONSchemaBench: ${bench:-none}"

out="${OUT:-$(mktemp -d -t troupe-structured.XXXXXX)}"
mkdir -p "$out"
coverage=""
if [[ ",$parts," == *,coverage,* ]]; then
  if [ -f ops/bench/schema_coverage.py ]; then
    coverage="$out/coverage.txt"
    echo "== coverage (ops/bench/schema_coverage.py)"
    cov_args=(--json "$out/coverage.json" --refusals "$out/coverage_refusals.txt")
    [ "${COVERAGE_LIMIT:-0}" != 0 ] && cov_args+=(--limit "$COVERAGE_LIMIT")
    [ "${COVERAGE_LLAMA:-1}" = 0 ] && cov_args+=(--no-llama)
    if [ "${SUBSETS:-all}" != all ]; then
      IFS=, read -ra subs <<<"$SUBSETS"
      for s in "${subs[@]}"; do cov_args+=(--subset "$s"); done
    fi
    "$python" ops/bench/schema_coverage.py "$troupe" "$bench" "${cov_args[@]}" | tee "$coverage" \
      || echo "schema_coverage.py failed; the other parts go on" >&2
  else
    echo "== coverage: ops/bench/schema_coverage.py not present, skipped"
  fi
fi
rest="$(tr , '\n' <<<"$parts" | grep -v '^coverage$' | paste -sd, || true)"
[ -n "$rest" ] || exit 0
"$python" ops/bench/structured_bench.py --troupe "$troupe" --llama-server "$llama" --llama-version "$version" \
  --ggufs "$ggufs" --bench "$bench" --parts "$rest" --cpu "$cpu" --coverage "$coverage" --out "$out"
echo "raw results: $out/results.jsonl; outputs: $out/*.jsonl"
