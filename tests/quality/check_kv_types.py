"""KV cache types on the real model: what quantizing the cache costs.

usage: check_kv_types.py TROUPE MODEL TEXT [--chunks N]

For f16, q8_0, k8v4 and q4_0 (`--kv-type`), on the same GGUF file and text:
  - `troupe perplexity` over TEXT at --context 512: q8_0 must be within 1 %
    of f16, k8v4 within 2 % and q4_0 within 20 % (a guard against getting
    worse: 4-bit keys cost +17.4 % on Qwen2.5-0.5B, docs/BENCHMARKS.md);
  - greedy answers to a few prompts (`troupe generate -t 0 --print-ids`, 64
    tokens): the share of tokens generated before the first one that differs
    from f16's must be at least 0.5 for q8_0, 0.35 for k8v4 and 0.25 for q4_0 (one differing
    token changes everything after it; a model near a tie flips early).
Prints every number; exits 1 when a bound is missed.
"""
import argparse
import re
import subprocess
import sys

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "Explain what a hash map is to a new programmer.",
    "What does the GNU General Public License require when you distribute a program?",
    "Write a C function that reverses a string in place.",
    "List three differences between TCP and UDP.",
    "Write a shell command that counts the lines of every .txt file in a folder.",
]
TYPES = ["f16", "q8_0", "k8v4", "q4_0"]
PPL_BOUND = {"q8_0": 0.01, "k8v4": 0.02, "q4_0": 0.20}
SHARE_BOUND = {"q8_0": 0.5, "k8v4": 0.35, "q4_0": 0.25}


def perplexity(troupe, model, text, kv, chunks):
    out = subprocess.run([troupe, "perplexity", "-m", model, text, "--context", "512", "--chunks", str(chunks),
                          "--kv-type", kv, "--threads", "2"], check=True, capture_output=True, text=True)
    m = re.search(r"Final estimate: PPL = ([0-9.]+)", out.stdout + out.stderr)
    if not m:
        raise RuntimeError("no PPL in: " + out.stdout + out.stderr)
    return float(m.group(1))


def greedy(troupe, model, prompt, kv):
    out = subprocess.run([troupe, "generate", "-m", model, "--chat", prompt, "-t", "0", "--max-tokens", "64",
                          "--kv-type", kv, "--threads", "2", "--print-ids", "-q"],
                         check=True, capture_output=True, text=True)
    ids = re.findall(r"-?\d+", out.stdout.strip().splitlines()[-1])
    return [int(i) for i in ids]


def same_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("troupe")
    p.add_argument("model")
    p.add_argument("text")
    p.add_argument("--chunks", type=int, default=16)
    a = p.parse_args()
    failed = False
    ppl = {kv: perplexity(a.troupe, a.model, a.text, kv, a.chunks) for kv in TYPES}
    for kv in TYPES:
        delta = ppl[kv] / ppl["f16"] - 1
        bound = PPL_BOUND.get(kv)
        bad = bound is not None and delta > bound
        failed |= bad
        print(f"perplexity {kv}: {ppl[kv]:.4f} ({delta:+.2%} against f16{'' if bound is None else f', bound {bound:.0%}'})"
              f"{'  FAILED' if bad else ''}")
    answers = {kv: [greedy(a.troupe, a.model, q, kv) for q in PROMPTS] for kv in TYPES}
    for kv in TYPES[1:]:
        kept = sum(same_prefix(f, g) for f, g in zip(answers["f16"], answers[kv]))
        total = sum(len(f) for f in answers["f16"])
        share = kept / total
        bad = share < SHARE_BOUND[kv]
        failed |= bad
        print(f"greedy {kv}: {kept} of {total} tokens before the first difference from f16 ({share:.2f}, "
              f"bound {SHARE_BOUND[kv]}){'  FAILED' if bad else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
