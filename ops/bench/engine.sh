#!/usr/bin/env bash
# Prefill (512-token prompt) and decode (128 tokens after it) speed of troupe against
# llama.cpp (llama-cpp-python, the same GGUF file, the same threads, in the
# same run) and ik_llama.cpp (its llama-bench, built natively by ops/llama-tools.sh ik:
# -p PROMPT -n 0 and -gp PROMPT,GEN, each the best of -fa 0/1 x -rtr 0/1, the flags printed),
# for each model in each format: the shipped Q4_K_M mix, and Q8_0
# made from it by `troupe quantize` (every engine reads that same file).
# The last line is the ratio summary.
#   ops/bench/engine.sh [MODEL...]       default: qwen2.5-coder-0.5b qwen2.5-coder-1.5b
# Env: THREADS (2), PROMPT_TOKENS (512), GEN_TOKENS (128), REPEAT (3), FORMATS ("Q4_K_M Q8_0"),
# IK (1; 0 leaves ik_llama.cpp out), BUILD_DIR (build: whose troupe runs, for before/after runs
# of two builds)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
threads="${THREADS:-2}" prompt="${PROMPT_TOKENS:-512}" gen="${GEN_TOKENS:-128}" repeat="${REPEAT:-3}"
read -ra formats <<<"${FORMATS:-Q4_K_M Q8_0}"
models=("$@")
((${#models[@]})) || models=(qwen2.5-coder-0.5b qwen2.5-coder-1.5b)
bench_python
ik="${IK:-1}"
((ik)) && bench_ik_tools
echo "cpu: $(bench_cpu), threads $threads"

summary=()
printf '%-30s %-12s %12s %12s\n' "model (format)" engine "prefill t/s" "decode t/s"
for m in "${models[@]}"; do
  shipped="$(bench_gguf "$m")"
  for f in "${formats[@]}"; do
    path="$shipped"
    if [ "$f" != Q4_K_M ]; then
      path="${shipped%.gguf}-${f,,}.gguf"
      [ -f "$path" ] || "$troupe" quantize "$shipped" "$path" --type "$f" >&2
    fi
    ours="$("$troupe" bench --model "$path" --threads "$threads" --prompt-tokens "$prompt" --gen-tokens "$gen" --repeat "$repeat")"
    theirs="$("$python" ops/bench/llama_cpp_bench.py "$path" "$threads" "$prompt" "$gen" "$repeat")"
    ik_rows=()
    if ((ik)); then
      ik_rows=("$(bench_ik_best "$path" "$threads" -p "$prompt" -n 0 -r "$repeat")"
               "$(bench_ik_best "$path" "$threads" -p 0 -n 0 -gp "$prompt,$gen" -r "$repeat")")
    fi
    out="$(bench_py engine-rows "$m ($f)" "$ours" "$theirs" "${ik_rows[@]}")"
    echo "$out" | head -n -1
    summary+=("$(echo "$out" | tail -n 1)")
  done
done
echo "troupe/peers (threads=$threads, prompt=$prompt, gen=$gen): $(IFS=';'; echo "${summary[*]}")"
