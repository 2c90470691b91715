#!/usr/bin/env bash
# Prefill (512-token prompt) and decode (128 tokens) speed of troupe against
# llama.cpp (llama-cpp-python, the same GGUF file, the same threads, in the
# same run), for each model in each format: the shipped Q4_K_M mix, and Q8_0
# made from it by `troupe quantize` (both engines read that same file).
# The last line is the ratio summary.
#   ops/bench/engine.sh [MODEL...]       default: qwen2.5-coder-0.5b qwen2.5-coder-1.5b
# Env: THREADS (2), PROMPT_TOKENS (512), GEN_TOKENS (128), REPEAT (3), FORMATS ("Q4_K_M Q8_0"),
# BUILD_DIR (build: whose troupe runs, for before/after runs of two builds)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
threads="${THREADS:-2}" prompt="${PROMPT_TOKENS:-512}" gen="${GEN_TOKENS:-128}" repeat="${REPEAT:-3}"
read -ra formats <<<"${FORMATS:-Q4_K_M Q8_0}"
models=("$@")
((${#models[@]})) || models=(qwen2.5-coder-0.5b qwen2.5-coder-1.5b)
bench_python

summary=()
printf '%-30s %-10s %12s %12s\n' "model (format)" engine "prefill t/s" "decode t/s"
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
    out="$(bench_py engine-rows "$m ($f)" "$ours" "$theirs")"
    echo "$out" | head -n -1
    summary+=("$(echo "$out" | tail -n 1)")
  done
done
echo "troupe/llama.cpp (threads=$threads, prompt=$prompt, gen=$gen): $(IFS=';'; echo "${summary[*]}")"
