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
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
model="${MODEL:-gemma3-270m}" threads="${THREADS:-2}" lengths=(${LENGTHS:-512 4096}) streams="${STREAMS:-16}"
prompt="${PROMPT_TOKENS:-64}" gen="${GEN_TOKENS:-128}" phases="${PHASES:-speed streams perplexity kv}"
python="$(ops/python-env.sh)"
path="$(ops/models.sh --path "$model")"
troupe="${BUILD_DIR:-$root/build}/troupe"
[ -x "$troupe" ] || ops/build.sh
bin="$(ops/llama-tools.sh)"
export PYTHONPATH="${BUILD_DIR:-$root/build}/python:$root/clients/python:$root/ops/bench"
echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), threads $threads, model $path"
has() { [[ " $phases " == *" $1 "* ]]; }
ratio() { "$python" -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$1" "$2"; }

if has speed; then
  echo "| tokens | troupe prefill | llama.cpp prefill | ratio | troupe decode at depth | llama.cpp decode at depth | ratio |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  for n in "${lengths[@]}"; do
    ours="$("$troupe" bench -m "$path" --threads "$threads" --prompt-tokens "$n" --gen-tokens 64 --repeat 2)"
    pp="$("$bin/llama-bench" -m "$path" -t "$threads" -p "$n" -n 0 -r 2 -o json 2>/dev/null | jq '.[0].avg_ts')"
    tg="$("$bin/llama-bench" -m "$path" -t "$threads" -p 0 -n 64 -d "$n" -r 2 -o json 2>/dev/null | jq '.[0].avg_ts')"
    op="$(jq '.prefill_tok_s' <<<"$ours")" od="$(jq '.decode_tok_s' <<<"$ours")"
    printf '| %s | %.1f | %.1f | **%sx** | %.1f | %.1f | **%sx** |\n' "$n" "$op" "$pp" "$(ratio "$op" "$pp")" \
      "$od" "$tg" "$(ratio "$od" "$tg")"
  done
fi

if has streams; then
  endpoint="ipc:///tmp/troupe-bench-gemma3-$$.sock"
  log="$(mktemp -t troupe-bench-gemma3.XXXXXX.log)" data="$(mktemp -d -t troupe-bench-gemma3.XXXXXX)"
  "$troupe" serve -m "$path" --listen "$endpoint" --threads "$threads" --kv-tokens 65536 --data-dir "$data" >"$log" 2>&1 &
  server=$!
  trap 'kill -TERM $server 2>/dev/null || true; rm -rf "$data"' EXIT
  until grep -q "listening on" "$log"; do kill -0 $server || { cat "$log"; exit 1; }; sleep 0.1; done
  served="$("$python" ops/bench/serve_load.py "$endpoint" concurrent "$streams" "$prompt" "$gen")"
  kill -TERM $server; wait $server || true
  # llama-batched-bench: S_TG is the batch's decode tok/s with every sequence decoding.
  peer="$("$bin/llama-batched-bench" -m "$path" -t "$threads" -tb "$threads" -c $(((prompt + gen) * streams + 64)) \
            -b 2048 -ub 512 -npp "$prompt" -ntg "$gen" -npl "$streams" --output-format jsonl 2>/dev/null | grep "^{" | tail -1)"
  s="$(jq '.aggregate_decode_tok_s' <<<"$served")" w="$(jq '.all_decoding_tok_s' <<<"$served")"
  p="$(jq '.speed_tg' <<<"$peer")"
  echo "$streams streams ($prompt prompt + $gen generated tokens each): troupe serve $s tok/s aggregate decode" \
       "($w while all decode), llama-batched-bench $p: **$(ratio "$s" "$p")x** (while all decode $(ratio "$w" "$p")x)"
fi

if has perplexity; then
  text=/usr/share/common-licenses/GPL-3
  ours="$("$troupe" perplexity -m "$path" "$text" --context 512 --threads "$threads" 2>&1 | sed -n 's/.*PPL = \([0-9.]*\).*/\1/p')"
  theirs="$("$bin/llama-perplexity" -m "$path" -f "$text" -c 512 -t "$threads" 2>&1 | sed -n 's/.*PPL = \([0-9.]*\).*/\1/p')"
  echo "perplexity of GPL-3 at context 512: troupe $ours, llama-perplexity $theirs (ratio $(ratio "$ours" "$theirs"))"
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
    echo "| $n | $full MiB | $kept MiB | $(ratio "$full" "$kept")x |"
  done
  # A real long prompt in that memory: GPL-3 twice (~17K tokens) at --context 32768.
  text="$(cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/GPL-3)"
  "$troupe" generate -m "$path" --context 32768 --prompt "$text" --max-tokens 16 --threads "$threads" 2>&1 >/dev/null |
    grep '^\['
fi
