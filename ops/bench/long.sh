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
#   evict     KV eviction (--kv-budget) with each --kv-type: perplexity on EVICT_TEXT in chunks of
#             EVICT_CONTEXT tokens with budgets of 1/4 and 1/8 of a chunk (each scored token sees
#             at most that many positions), against the same type without eviction; bytes a
#             context token = the type's bytes x the share kept; llama-perplexity's f16 on the
#             same text and context as the peer's baseline;
#   session   a SESSION_TURNS-turn chat session on --context 1024 under the
#             window policy: TTFT p50/p99 per quarter of the run (flat when a
#             shift costs no prefill of the kept window);
#   documents examples/summarize-papers/documents (ten documents, 4K-23K
#             tokens) as one batch job at --context 32768: seconds per
#             summary and the job's wall time.
# Env: MODEL (qwen2.5-coder-0.5b), THREADS (2), LENGTHS ("4096 16384 32768"),
# PHASES ("speed kv session documents"; evict on request), KV_MEMORY_GIB (1), SESSION_TURNS (300),
# EVICT_TEXT (examples/summarize-papers/documents/07-python-logging-howto.txt), EVICT_CONTEXT (4096).
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

if bench_in "$phases" evict; then
  text="${EVICT_TEXT:-examples/summarize-papers/documents/07-python-logging-howto.txt}" ctx="${EVICT_CONTEXT:-4096}"
  bench_llama_tools
  theirs="$("$llama_bin/llama-perplexity" -m "$path" -f "$text" -c "$ctx" -t "$threads" 2>&1 | bench_ppl)"
  echo "text $text, chunks of $ctx; llama-perplexity f16: $theirs"
  echo "| KV type | budget | bytes a context token | of f16 | troupe PPL | vs the type without eviction | vs f16 |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  f16_bytes="" f16_ppl=""
  for kv in f16 q8_0 k8v4 q4_0; do
    bytes="$("$troupe" bench -m "$path" --prompt-tokens 16 --gen-tokens 1 --kv-type "$kv" --threads 1 |
             jq -r .backend | sed -n 's/.*, \([0-9]*\) bytes a token.*/\1/p')"
    [ -z "$f16_bytes" ] && f16_bytes="$bytes"
    whole=""
    for share in 1 4 8; do
      budget=$((share == 1 ? 0 : ctx / share))
      p="$("$troupe" perplexity -m "$path" "$text" --context "$ctx" --kv-type "$kv" --kv-budget "$budget" \
             --threads "$threads" 2>&1 | bench_ppl)"
      [ -z "$whole" ] && whole="$p"
      [ -z "$f16_ppl" ] && f16_ppl="$p"
      awk -v kv="$kv" -v s="$share" -v b="$budget" -v by="$bytes" -v fb="$f16_bytes" -v p="$p" -v w="$whole" \
          -v f="$f16_ppl" 'BEGIN{printf "| %s | %s | %.0f | %.3f | %.4f | %+.2f %% | %+.2f %% |\n", kv,
          (s == 1 ? "all" : "1/" s " (" b ")"), by / s, by / s / fb, p, (p / w - 1) * 100, (p / f - 1) * 100}'
    done
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
