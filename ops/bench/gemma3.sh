#!/usr/bin/env bash
# Gemma 3 270M against llama.cpp on the same file, threads and run
# (docs/BENCHMARKS.md, "Gemma 3"):
#   speed       prefill tok/s of a 512- and a 4,096-token prompt (`troupe bench`
#               against `llama-bench -p N`) and decode tok/s at those depths
#               (`-n 64 -d N`);
#   streams     STREAMS greedy streams through `troupe serve` (aggregate decode,
#               and while all decode) against `llama-batched-bench` decoding
#               STREAMS sequences in one batch (-npp PROMPT_TOKENS -ntg GEN_TOKENS);
#   perplexity  GPL-3 at --context 512: troupe against llama-perplexity;
#   kv          KV memory the engine allocates for a 4K/16K/32K sequence with
#               local layers windowed, against every layer in every page; and a
#               17K-token prompt run in that memory.
# Env: MODEL (gemma3-270m), THREADS (2), LENGTHS ("512 4096"), STREAMS (16),
# PROMPT_TOKENS (64), GEN_TOKENS (128), PHASES ("speed streams perplexity kv").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
model="${MODEL:-gemma3-270m}" threads="${THREADS:-2}" streams="${STREAMS:-16}"
read -ra lengths <<<"${LENGTHS:-512 4096}"
prompt="${PROMPT_TOKENS:-64}" gen="${GEN_TOKENS:-128}" phases="${PHASES:-speed streams perplexity kv}"
bench_python
path="$(bench_gguf "$model")"
bench_llama_tools
echo "cpu: $(bench_cpu), threads $threads, model $path"
has() { bench_in "$phases" "$1"; }

if has speed; then
  echo "| tokens | troupe prefill | llama.cpp prefill | ratio | troupe decode at depth | llama.cpp decode at depth | ratio |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  for n in "${lengths[@]}"; do
    row="$(bench_depth "$path" "$threads" "$n" 2)"
    op="$(jq '.ours.prefill_tok_s' <<<"$row")" od="$(jq '.ours.decode_tok_s' <<<"$row")"
    pp="$(jq '.pp' <<<"$row")" tg="$(jq '.tg' <<<"$row")"
    printf '| %s | %.1f | %.1f | **%sx** | %.1f | %.1f | **%sx** |\n' "$n" "$op" "$pp" "$(bench_ratio "$op" "$pp")" \
      "$od" "$tg" "$(bench_ratio "$od" "$tg")"
  done
fi

if has streams; then
  bench_work gemma3
  bench_serve serve -m "$path" --threads "$threads" --kv-tokens 65536
  served="$("$python" ops/bench/serve_load.py "$endpoint" concurrent "$streams" "$prompt" "$gen")"
  bench_stop TERM
  # llama-batched-bench: S_TG is the batch's decode tok/s with every sequence decoding.
  p="$(bench_llama_batched "$path" "$threads" "$streams" "$prompt" "$gen")"
  s="$(jq '.aggregate_decode_tok_s' <<<"$served")" w="$(jq '.all_decoding_tok_s' <<<"$served")"
  echo "$streams streams ($prompt prompt + $gen generated tokens each): troupe serve $s tok/s aggregate decode" \
       "($w while all decode), llama-batched-bench $p: **$(bench_ratio "$s" "$p")x** (while all decode $(bench_ratio "$w" "$p")x)"
fi

if has perplexity; then
  text=/usr/share/common-licenses/GPL-3
  ours="$("$troupe" perplexity -m "$path" "$text" --context 512 --threads "$threads" 2>&1 | bench_ppl)"
  theirs="$("$llama_bin/llama-perplexity" -m "$path" -f "$text" -c 512 -t "$threads" 2>&1 | bench_ppl)"
  echo "perplexity of GPL-3 at context 512: troupe $ours, llama-perplexity $theirs (ratio $(bench_ratio "$ours" "$theirs"))"
fi

if has kv; then
  # Measured: the KV the engine allocates for one sequence of each length
  # (`troupe generate --context N` reports it), against every layer in every page.
  echo "| sequence | every layer full | local layers windowed | ratio |"
  echo "| --- | --- | --- | --- |"
  for n in 4096 16384 32768; do
    line="$("$troupe" generate -m "$path" --context "$n" --prompt Hello --max-tokens 1 --threads "$threads" 2>&1 >/dev/null |
            grep 'MiB of KV')"
    kept="$(sed -n 's/.*; \([0-9.]*\) MiB of KV.*/\1/p' <<<"$line")"
    full="$(sed -n 's/.*MiB of KV, \([0-9.]*\) with every layer.*/\1/p' <<<"$line")"
    echo "| $n | $full MiB | $kept MiB | $(bench_ratio "$full" "$kept")x |"
  done
  # A real long prompt in that memory: GPL-3 twice (~17K tokens) at --context 32768.
  text="$(cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/GPL-3)"
  "$troupe" generate -m "$path" --context 32768 --prompt "$text" --max-tokens 16 --threads "$threads" 2>&1 >/dev/null |
    grep '^\['
fi
