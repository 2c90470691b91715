#!/usr/bin/env bash
# Long context on the default model (docs/BENCHMARKS.md, "Long context"):
#   speed     prefill tok/s of an N-token prompt and decode tok/s at depth N,
#             troupe (`troupe bench`) against llama.cpp's own llama-bench
#             (`-p N` and `-n 64 -d N`, built natively by ops/llama-tools.sh) and
#             ik_llama.cpp's (`-p N` and `-gp N,64`, each the best of -fa 0/1 x -rtr 0/1;
#             IK=0 leaves it out),
#             same GGUF file, same threads, same run; and troupe at 512 for
#             its own long/short ratio;
#   kv        KV bytes per token of each --kv-type, the longest context that
#             fits in KV_MEMORY_GIB, and perplexity on GPL-3 at --context 512
#             (troupe per type; llama-perplexity with f16, q8_0 and q4_0 caches);
#   evict     KV eviction (--kv-budget) with each --kv-type: perplexity on EVICT_TEXT in chunks of
#             EVICT_CONTEXT tokens with budgets of 1/S of a chunk for each S of EVICT_SHARES
#             (4 and 8; a decimal S such as 3.4 gives a budget in between; each scored token
#             sees at most that many positions), against the same type without eviction; bytes a
#             context token = the type's bytes x the share kept; llama-perplexity's f16 on the
#             same text and context as the peer's baseline;
#   precision attention in bf16 against fp32 (--attention-precision): troupe's prefill of 512
#             tokens and of each of LENGTHS in both (and each length's share of its own 512
#             rate), llama-bench's prefill of the same lengths (-fa 1) in the same run, and
#             perplexity in both on EVICT_TEXT in chunks of 4096 and on PRECISION_TEXT in
#             chunks of 16384 (a chunk needs twice its length of text: by default documents 09
#             and 10 joined, 41.7K tokens, two chunks);
#   session   a SESSION_TURNS-turn chat session on --context 1024 under the
#             window policy: TTFT p50/p99 per quarter of the run (flat when a
#             shift costs no prefill of the kept window);
#   documents examples/summarize-papers/documents (ten documents, 4K-23K
#             tokens) as one batch job at --context 32768: seconds per
#             summary and the job's wall time.
# Env: MODEL (qwen2.5-coder-0.5b), THREADS (2), LENGTHS ("4096 16384 32768"),
# PHASES ("speed kv session documents"; evict and precision on request), KV_MEMORY_GIB (1),
# SESSION_TURNS (300), EVICT_TEXT (examples/summarize-papers/documents/07-python-logging-howto.txt),
# EVICT_CONTEXT (4096), EVICT_SHARES ("4 8"), EVICT_KV_TYPES ("f16 q8_0 k8v4 q4_0"; f16 first: the
# baseline of "vs f16"), PRECISION_TEXT (documents 09 and 10 of examples/summarize-papers, joined).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
model="${MODEL:-qwen2.5-coder-0.5b}" threads="${THREADS:-2}"
read -ra lengths <<<"${LENGTHS:-4096 16384 32768}"
phases="${PHASES:-speed kv session documents}" kv_gib="${KV_MEMORY_GIB:-1}" turns="${SESSION_TURNS:-300}"
ik="${IK:-1}"
bench_python
path="$(bench_gguf "$model")"
echo "cpu: $(bench_cpu), threads $threads, model $path"

if bench_in "$phases" speed; then
  bench_llama_tools
  ((ik)) && bench_ik_tools
  short="$("$troupe" bench -m "$path" --threads "$threads" --prompt-tokens 512 --gen-tokens 64 --repeat 2)"
  rows=()
  for n in "${lengths[@]}"; do
    row="$(bench_depth "$path" "$threads" "$n" 1)"
    if ((ik)); then
      ikp="$(bench_ik_best "$path" "$threads" -p "$n" -n 0 -r 1)"
      ikg="$(bench_ik_best "$path" "$threads" -p 0 -n 0 -gp "$n,64" -r 1)"
      row="$(jq -c --argjson p "$ikp" --argjson g "$ikg" '. + {ik_pp: $p, ik_tg: $g}' <<<"$row")"
    fi
    rows+=("$row")
    echo "${rows[-1]}" >&2
  done
  printf '%s\n' "${rows[@]}" | jq -rs --argjson short "$short" '
    def r2: . * 100 | round / 100;
    def ik(f; k): if .[f] then " \(.[f].ts | r2) (\(.[f].flags)) | **\(.ours[k] / .[f].ts | r2)x** |" else " - | - |" end;
    "| tokens | troupe prefill | llama.cpp prefill | ratio | ik_llama.cpp prefill | ratio | troupe decode at depth | llama.cpp decode at depth | ratio | ik_llama.cpp decode | ratio |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    (.[] | "| \(.n) | \(.ours.prefill_tok_s) | \(.pp | r2) | **\(.ours.prefill_tok_s / .pp | r2)x** |" + ik("ik_pp"; "prefill_tok_s") +
      " \(.ours.decode_tok_s) | \(.tg | r2) | **\(.ours.decode_tok_s / .tg | r2)x** |" + ik("ik_tg"; "decode_tok_s")),
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
  read -ra shares <<<"${EVICT_SHARES:-4 8}"
  read -ra kv_types <<<"${EVICT_KV_TYPES:-f16 q8_0 k8v4 q4_0}"
  if [ "${kv_types[0]:-}" != f16 ]; then
    echo "EVICT_KV_TYPES must start with f16: the baseline of \"vs f16\"" >&2
    exit 2
  fi
  bench_llama_tools
  theirs="$("$llama_bin/llama-perplexity" -m "$path" -f "$text" -c "$ctx" -t "$threads" 2>&1 | bench_ppl)"
  echo "text $text, chunks of $ctx; llama-perplexity f16: $theirs"
  echo "| KV type | budget | bytes a context token | of f16 | troupe PPL | vs the type without eviction | vs f16 |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  f16_bytes="" f16_ppl=""
  for kv in "${kv_types[@]}"; do
    bytes="$("$troupe" bench -m "$path" --prompt-tokens 16 --gen-tokens 1 --kv-type "$kv" --threads 1 |
             jq -r .backend | sed -n 's/.*, \([0-9]*\) bytes a token.*/\1/p')"
    [ -z "$f16_bytes" ] && f16_bytes="$bytes"
    whole=""
    for share in 1 "${shares[@]}"; do
      budget="$(awk -v c="$ctx" -v s="$share" 'BEGIN{print s == 1 ? 0 : int(c / s)}')"
      p="$("$troupe" perplexity -m "$path" "$text" --context "$ctx" --kv-type "$kv" --kv-budget "$budget" \
             --threads "$threads" 2>&1 | bench_ppl)"
      [ -z "$whole" ] && whole="$p"
      [ -z "$f16_ppl" ] && f16_ppl="$p"
      awk -v kv="$kv" -v s="$share" -v b="$budget" -v c="$ctx" -v by="$bytes" -v fb="$f16_bytes" -v p="$p" \
          -v w="$whole" -v f="$f16_ppl" 'BEGIN{k = b ? b / c : 1;  # the share of a chunk kept
          printf "| %s | %s | %.0f | %.3f | %.4f | %+.2f %% | %+.2f %% |\n", kv,
          (s == 1 ? "all" : "1/" s " (" b ")"), by * k, by * k / fb, p, (p / w - 1) * 100, (p / f - 1) * 100}'
    done
  done
fi

if bench_in "$phases" precision; then
  text="${EVICT_TEXT:-examples/summarize-papers/documents/07-python-logging-howto.txt}"
  long_text="${PRECISION_TEXT:-}"
  if [ -z "$long_text" ]; then
    long_text="$(mktemp --suffix .txt)"
    cat examples/summarize-papers/documents/{09,10}-*.txt >"$long_text"
  fi
  bench_llama_tools
  prefill() {  # prefill PRECISION TOKENS REPEAT: troupe bench's prefill tok/s
    "$troupe" bench -m "$path" --threads "$threads" --prompt-tokens "$2" --gen-tokens 1 --repeat "$3" \
      --attention-precision "$1" | jq -r .prefill_tok_s
  }
  ppl() {  # ppl PRECISION TEXT CONTEXT
    "$troupe" perplexity -m "$path" "$2" --context "$3" --threads "$threads" --attention-precision "$1" 2>&1 | bench_ppl
  }
  echo "perplexity: $text in chunks of 4096, $long_text in chunks of 16384"
  header="| attention | prefill 512" rule="| --- | ---"
  for n in "${lengths[@]}"; do header+=" | prefill $n (of 512)" rule+=" | ---"; done
  echo "$header | PPL 4K | vs fp32 | PPL 16K | vs fp32 |"
  echo "$rule | --- | --- | --- | --- |"
  base4="" base16=""
  for precision in fp32 bf16; do
    short="$(prefill "$precision" 512 5)"  # the share's base: best of 5, the short run is the noisy one
    row="| $precision | $short"
    for n in "${lengths[@]}"; do
      rate="$(prefill "$precision" "$n" 1)"
      row+="$(awk -v r="$rate" -v s="$short" 'BEGIN{printf " | %s (%.0f %%)", r, r / s * 100}')"
    done
    p4="$(ppl "$precision" "$text" 4096)" p16="$(ppl "$precision" "$long_text" 16384)"
    [ -z "$base4" ] && base4="$p4" base16="$p16"
    echo "$row$(awk -v a="$p4" -v b="$base4" -v c="$p16" -v d="$base16" \
      'BEGIN{printf " | %.4f | %+.3f %% | %.4f | %+.3f %% |", a, (a / b - 1) * 100, c, (c / d - 1) * 100}')"
  done
  row="| llama.cpp (-fa 1) | $(bench_llama_ts -m "$path" -t "$threads" -p 512 -n 0 -r 2 -fa 1)"
  for n in "${lengths[@]}"; do row+=" | $(bench_llama_ts -m "$path" -t "$threads" -p "$n" -n 0 -r 1 -fa 1)"; done
  echo "$row | | | | |"
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
