"""Passkey retrieval: can the model find one sentence in a long document?

usage: check_passkey.py TROUPE MODEL --tokens 4096[,8192...] [--depths 0.1,0.5,0.9] [--kv-type T]
                       [--kv-budget-share 0.125]

For each length and depth, a prompt of about that many tokens of filler
with "The pass key is NNNNN. Remember it." placed at that share of the way
in goes to `troupe generate --chat` (greedy, 20 tokens, --context just over
the prompt); the answer must hold the number. With --kv-budget-share the
KV is cut to that share of the prompt's tokens once the prompt is read
(`--kv-budget`, the rest evicted): the answer comes from what was kept. The filler is the usual one of
the passkey literature (Mohtashami and Jaggi, 2023): repeated plain
sentences that say nothing. Each case's key is different (seeded), so a
model cannot pass by repeating an earlier answer. Prints one line per case
with the prefill speed; exits 1 if any case misses.
"""
import argparse
import random
import re
import subprocess
import sys
import time

INTRO = ("There is an important piece of information hidden inside a lot of irrelevant text. "
         "Find it and memorize it. I will quiz you about it.\n\n")
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
QUESTION = "\n\nWhat is the pass key? Answer with the number only."


def count_tokens(troupe, model, text):
    out = subprocess.run([troupe, "tokenize", "-m", model], input=text, check=True, capture_output=True, text=True)
    return len(out.stdout.split())


def run_case(troupe, model, filler_tokens, n_tokens, depth, key, kv_type, budget_share):
    # The whole case fits n_tokens: the intro, key, question, chat template
    # and the 20 answer tokens take ~140, so 32768 fills the native window.
    reps = max(1, int((n_tokens - 160) / filler_tokens))
    at = int(reps * depth)
    needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
    text = INTRO + FILLER * at + needle + FILLER * (reps - at) + QUESTION
    prompt_tokens = count_tokens(troupe, model, text) + 32  # the chat template's tokens
    cmd = [troupe, "generate", "-m", model, "--chat", text, "-t", "0", "--max-tokens", "20",
           "--context", str(prompt_tokens + 32), "--kv-type", kv_type, "--threads", "2"]
    if budget_share:
        cmd += ["--kv-budget", str(int(prompt_tokens * budget_share))]
    start = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if out.returncode != 0:
        raise RuntimeError(f"troupe generate failed: {out.stderr.strip()}")
    m = re.search(r"([0-9.]+) tok/s prefill", out.stderr)
    return out.stdout.strip(), prompt_tokens, seconds, m.group(1) if m else "?"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("troupe")
    p.add_argument("model")
    p.add_argument("--tokens", default="4096")
    p.add_argument("--depths", default="0.1,0.5,0.9")
    p.add_argument("--kv-type", default="f16")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--kv-budget-share", type=float, default=0.0)
    a = p.parse_args()
    rng = random.Random(a.seed)
    filler_tokens = count_tokens(a.troupe, a.model, FILLER * 100) / 100
    missed = 0
    budget = f", budget {a.kv_budget_share:g} of the prompt" if a.kv_budget_share else ""
    for n in [int(x) for x in a.tokens.split(",")]:
        for depth in [float(x) for x in a.depths.split(",")]:
            key = rng.randint(10000, 99999)
            answer, tokens, seconds, prefill = run_case(a.troupe, a.model, filler_tokens, n, depth, key, a.kv_type,
                                                        a.kv_budget_share)
            found = str(key) in answer
            missed += not found
            print(f"passkey {n} tokens (prompt {tokens}), depth {depth:.0%}, kv {a.kv_type}{budget}: "
                  f"{'found' if found else 'MISSED'} {key} in {answer!r} ({seconds:.0f} s, {prefill} tok/s prefill)",
                  flush=True)
    print(f"passkey: {missed} missed")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
