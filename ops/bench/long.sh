#!/usr/bin/env bash
# Long context on the default model (docs/BENCHMARKS.md, "Long context"):
#   speed     prefill tok/s of an N-token prompt and decode tok/s at depth N,
#             troupe (`troupe bench`) against llama.cpp's own llama-bench
#             (`-p N` and `-n 64 -d N`, built natively by ops/llama-tools.sh),
#             same GGUF file, same threads, same run; and troupe at 512 for
#             its own long/short ratio;
#   kv        KV bytes per token of each --kv-type, the longest context that
#             fits in KV_MEMORY_GIB, and perplexity on GPL-3 at --context 512
#             (troupe per type; llama-perplexity with f16, q8_0 and q4_0 caches);
#   session   a SESSION_TURNS-turn chat session on --context 1024 under the
#             window policy: TTFT p50/p99 per quarter of the run (flat when a
#             shift costs no prefill of the kept window);
#   documents examples/summarize-papers/documents (ten documents, 4K-23K
#             tokens) as one batch job at --context 32768: seconds per
#             summary and the job's wall time.
# Env: MODEL (qwen2.5-coder-0.5b), THREADS (2), LENGTHS ("4096 16384 32768"),
# PHASES ("speed kv session documents"), KV_MEMORY_GIB (1), SESSION_TURNS (300).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
model="${MODEL:-qwen2.5-coder-0.5b}" threads="${THREADS:-2}"
read -ra lengths <<<"${LENGTHS:-4096 16384 32768}"
phases="${PHASES:-speed kv session documents}" kv_gib="${KV_MEMORY_GIB:-1}" turns="${SESSION_TURNS:-300}"
bench_python
path="$(bench_gguf "$model")"
echo "cpu: $(bench_cpu), threads $threads, model $path"

if bench_in "$phases" speed; then
  bench_llama_tools
  short="$("$troupe" bench -m "$path" --threads "$threads" --prompt-tokens 512 --gen-tokens 64 --repeat 2)"
  rows=()
  for n in "${lengths[@]}"; do
    rows+=("$(bench_depth "$path" "$threads" "$n" 1)")
    echo "${rows[-1]}" >&2
  done
  printf '%s\n' "${rows[@]}" | jq -rs --argjson short "$short" '
    "| tokens | troupe prefill | llama.cpp prefill | ratio | troupe decode at depth | llama.cpp decode at depth | ratio |",
    "| --- | --- | --- | --- | --- | --- | --- |",
    (.[] | "| \(.n) | \(.ours.prefill_tok_s) | \(.pp * 100 | round / 100) | **\(.ours.prefill_tok_s / .pp * 100 | round / 100)x** | \(.ours.decode_tok_s) | \(.tg * 100 | round / 100) | **\(.ours.decode_tok_s / .tg * 100 | round / 100)x** |"),
    "troupe at 512: prefill \($short.prefill_tok_s), decode \($short.decode_tok_s); " +
    (map("at \(.n): \(.ours.prefill_tok_s / $short.prefill_tok_s * 100 | round) % of the 512 prefill") | join(", "))'
fi

if bench_in "$phases" kv; then
  text=/usr/share/common-licenses/GPL-3
  bench_llama_tools
  declare -A ppl bytes
  for kv in f16 q8_0 k8v4 q4_0; do
    ppl[$kv]="$("$troupe" perplexity -m "$path" "$text" --context 512 --kv-type "$kv" --threads "$threads" 2>&1 | bench_ppl)"
    bytes[$kv]="$("$troupe" bench -m "$path" --prompt-tokens 16 --gen-tokens 1 --kv-type "$kv" --threads 1 |
                  jq -r .backend | sed -n 's/.*, \([0-9]*\) bytes a token.*/\1/p')"
  done
  llama_ppl() { "$llama_bin/llama-perplexity" -m "$path" -f "$text" -c 512 -t "$threads" "$@" 2>&1 | bench_ppl; }
  declare -A theirs=([f16]="$(llama_ppl -ctk f16 -ctv f16)" [q8_0]="$(llama_ppl -fa on -ctk q8_0 -ctv q8_0)"
                     [q4_0]="$(llama_ppl -fa on -ctk q4_0 -ctv q4_0)")
  echo "| KV type | bytes a token | of f16 | tokens in $kv_gib GiB | troupe PPL | vs f16 | llama.cpp PPL | vs f16 |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
  for kv in f16 q8_0 k8v4 q4_0; do
    t="${theirs[$kv]:--}" dt="-"  # llama.cpp has no k8v4 cache type
    [ "$t" != - ] && dt="$(awk -v a="$t" -v b="${theirs[f16]}" 'BEGIN{printf "%+.2f %%", (a/b-1)*100}')"
    awk -v kv="$kv" -v b="${bytes[$kv]}" -v f="${bytes[f16]}" -v g="$kv_gib" -v p="${ppl[$kv]}" -v pf="${ppl[f16]}" \
        -v t="$t" -v dt="$dt" \
      'BEGIN{printf "| %s | %d | %.3f | %d | %.4f | %+.2f %% | %s | %s |\n", kv, b, b/f, g*1073741824/b, p, (p/pf-1)*100, t, dt}'
  done
fi

bench_work long
serve() {  # serve NAME [flags...]: troupe serve on ipc://$work/NAME.sock
  local name="$1"
  shift
  bench_serve "$name" -m "$path" --threads "$threads" "$@"
}

if bench_in "$phases" session; then
  serve session --context 1024
  "$python" ops/bench/long_bench.py "$endpoint" session "$turns"
  bench_stop TERM
fi

if bench_in "$phases" documents; then
  serve documents --context 32768 --kv-tokens 34816
  "$python" ops/bench/long_bench.py "$endpoint" documents examples/summarize-papers/documents
  bench_stop TERM
fi
