#!/usr/bin/env bash
# A mixture of experts of a realistic shape against llama.cpp on the same file
# (docs/BENCHMARKS.md, "Mixture of experts"): a synthetic qwen2moe written by
# `troupe make-model` (d 1024, 24 layers, 32 experts of 512, top-4, a shared
# expert of 1024, Q4_K), and two dense qwen2 files beside it, one with the
# same total feed-forward parameters and one with the same active ones.
#   troupe bench (prefill 512, decode 64 at batch 1, decode at batch 16)
#   against llama-bench (-p 512, -n 64) and llama-batched-bench (16 sequences),
#   same threads, same run; then decode tok/s of the three files side by side.
# Env: THREADS (2), DIR (~/.cache/troupe/synthetic), STREAMS (16), ROUNDS (3: each side's best
# of that many alternating runs).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
threads="${THREADS:-2}" streams="${STREAMS:-16}" rounds="${ROUNDS:-3}"
dir="${DIR:-${TROUPE_HOME:-$HOME/.cache/troupe}/synthetic}"
bench_python
bench_llama_tools
mkdir -p "$dir"
shape=(--embd 1024 --layers 24 --heads 16 --kv-heads 16 --type Q4_K --seed 5 --context 4096)
make() {  # name, extra make-model flags
  [ -f "$dir/$1.gguf" ] || "$troupe" make-model -o "$dir/$1.gguf" "${shape[@]}" "${@:2}" >&2
  echo "$dir/$1.gguf"
}
# Expert feed-forward per layer: 32 x 3 x 1024 x 512 + the shared 3 x 1024 x 1024 = 53.5 M values;
# a token uses 4 x 512 + 1024 = 3,072 of its width: dense ff 17,408 (total) and 3,072 (active).
moe="$(make moe-32x512-top4 --arch qwen2moe --ff 1024 --experts 32 --experts-used 4 --expert-ff 512 --shared-expert-ff 1024)"
total="$(make dense-ff17408 --arch qwen2 --ff 17408)"
active="$(make dense-ff3072 --arch qwen2 --ff 3072)"
echo "cpu: $(bench_cpu), threads $threads"

# The machines are shared: each measure alternates troupe and its peer ROUNDS
# times and keeps each side's best (interference only ever slows a run).
runs_op=() runs_od=() runs_pp=() runs_tg=() runs_ob=() runs_p=()  # each measure's ROUNDS values
for _ in $(seq "$rounds"); do
  # Decode as llama-bench -n 64 measures it, from (near) an empty context: a 16-token prompt.
  runs_op+=("$("$troupe" bench -m "$moe" --threads "$threads" --prompt-tokens 512 --gen-tokens 2 --repeat 2 | jq '.prefill_tok_s')")
  runs_pp+=("$(bench_llama_ts -m "$moe" -t "$threads" -p 512 -n 0 -r 2)")
  runs_od+=("$("$troupe" bench -m "$moe" --threads "$threads" --prompt-tokens 16 --gen-tokens 64 --repeat 2 | jq '.decode_tok_s')")
  runs_tg+=("$(bench_llama_ts -m "$moe" -t "$threads" -p 0 -n 64 -r 2)")
  runs_ob+=("$("$troupe" bench -m "$moe" --threads "$threads" --batch "$streams" --prompt-tokens 64 --gen-tokens 64 --repeat 1 |
         jq '.decode_tok_s')")
  runs_p+=("$(bench_llama_batched "$moe" "$threads" "$streams" 64 64)")
done
op="$(bench_best "${runs_op[@]}")" pp="$(bench_best "${runs_pp[@]}")" od="$(bench_best "${runs_od[@]}")"
tg="$(bench_best "${runs_tg[@]}")" ob="$(bench_best "${runs_ob[@]}")" p="$(bench_best "${runs_p[@]}")"
echo "MoE prefill 512: troupe $op, llama-bench $pp: **$(bench_ratio "$op" "$pp")x**"
echo "MoE decode (batch 1): troupe $od, llama-bench $tg: **$(bench_ratio "$od" "$tg")x**"
echo "MoE $streams streams (decode, all decoding): troupe $ob, llama-batched-bench $p: **$(bench_ratio "$ob" "$p")x**"
for f in "$total" "$active"; do
  d="$("$troupe" bench -m "$f" --threads "$threads" --prompt-tokens 16 --gen-tokens 64 --repeat 2 | jq '.decode_tok_s')"
  echo "dense $(basename "$f" .gguf): troupe decode $d tok/s (MoE/dense $(bench_ratio "$od" "$d"))"
done
stat -c '%s %n' "$moe" "$total" "$active"
