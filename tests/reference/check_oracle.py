"""Greedy generation on the real default model, troupe against llama.cpp.

usage: check_oracle.py TROUPE_BINARY MODEL_GGUF [N_TOKENS]

llama.cpp (through llama-cpp-python, the same GGUF file) is the oracle. For
each prompt both engines start from the same token ids (checked: troupe's
tokenizer must produce llama.cpp's ids for the chat-formatted prompt).

1. Greedy tokens: both decode greedily; the generated ids must be identical,
   except where llama.cpp's own two best logits are closer than TIE: there
   the engines may pick different tokens and that prompt is compared no
   further. At least 5 prompts must give N identical tokens.
2. Logits under teacher forcing: troupe scores the prompt plus llama.cpp's
   continuation (`troupe logits`), and at every generated position its
   decision margin (its logit for llama.cpp's best token minus its logit for
   llama.cpp's second) is compared with llama.cpp's. The mean discrepancy
   must stay under MEAN_LIMIT, and wherever llama.cpp's margin is at least
   TIE troupe must pick the same token. A wrong kernel, RoPE or quantization
   moves margins by whole logits; rounding moves them by tenths.

Why TIE is 0.4: both engines quantize activations to 8 bits, and a last-bit
difference in any float operation (an exp, a sum's order) moves some codes,
which on this model moves logits by up to ~0.4. Measured over these prompts
(2026-11-30, docs/TESTING.md): margin discrepancy mean 0.08, p99
0.29, max 0.33-0.39, for troupe builds whose exponentials differ in the last
bit of 0.05 % of values. Greedy tokens follow exactly only while margins
stay above that.
"""
import subprocess
import sys
import tempfile

import numpy as np
from llama_cpp import Llama

TIE = 0.4  # logits: where llama.cpp's top two are closer, either engine may pick either
MEAN_LIMIT = 0.15  # mean |margin discrepancy| over every generated position (measured 0.08)

PROMPTS = [
    "Describe the city of Paris for a first-time visitor.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Explain what a hash table is in two sentences.",
    "Write a C++ class for a thread-safe queue.",
    "Translate 'good morning' into German and Spanish.",
    "def quicksort(arr):",
    "你好！请介绍一下你自己。",
    "Explain the difference between a process and a thread.",
    "Write a SQL query that finds the ten most recent orders.",
    "What does the Unix command `grep -r` do? Give an example.",
    "Explain how binary search works, step by step.",
    "Write a JavaScript function that debounces another function.",
]


def chatml(user):
    return ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def llama_greedy(llm, ids, n, eog):
    """Greedy tokens and, per token, the margin between the two best logits."""
    llm.reset()
    llm.eval(ids)
    out, margins = [], []
    for _ in range(n):
        row = llm.scores[llm.n_tokens - 1]
        top2 = np.partition(row, -2)[-2:]
        t = int(np.argmax(row))
        margins.append(float(top2[1] - top2[0]))
        if t in eog:
            break
        out.append(t)
        llm.eval([t])
    return out, margins


def compare_logits(troupe, model, llm, ids, continuation, discrepancies):
    """Teacher forcing: troupe's margins at llama.cpp's tokens. Returns 1 on a real disagreement."""
    seq = ids + continuation
    llm.reset()
    llm.eval(seq)
    theirs = np.array(llm.scores[:len(seq)])
    with tempfile.NamedTemporaryFile(suffix=".f32") as out:
        subprocess.run([troupe, "logits", "--model", model, "--tokens", " ".join(map(str, seq)), "--out", out.name,
                        "--threads", "2"], capture_output=True, check=True)
        ours = np.fromfile(out.name, dtype=np.float32).reshape(len(seq), -1)
    bad = 0
    for i in range(len(ids) - 1, len(seq) - 1):
        best, second = np.argsort(-theirs[i])[:2]
        margin_theirs = theirs[i][best] - theirs[i][second]
        margin_ours = ours[i][best] - ours[i][second]
        discrepancies.append(abs(margin_theirs - margin_ours))
        if margin_theirs >= TIE and int(np.argmax(ours[i])) != best:
            print(f"LOGITS position {i}: llama.cpp's best token {best} leads by {margin_theirs:.4f}; "
                  f"troupe's best is {int(np.argmax(ours[i]))}")
            bad = 1
    return bad


def main():
    troupe, model = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    llm = Llama(model_path=model, n_ctx=1024, n_threads=2, n_batch=512, logits_all=True, verbose=False)
    eog = {llm.token_eos()} | {t for t in range(llm.n_vocab())
                                if llm.detokenize([t], special=True) in (b"<|im_end|>", b"<|endoftext|>")}
    failures = full_length = 0
    discrepancies = []
    for p in PROMPTS:
        text = chatml(p)
        ids = llm.tokenize(text.encode(), add_bos=False, special=True)
        ours = subprocess.run([troupe, "tokenize", "--model", model, "--special"], input=text.encode(),
                              capture_output=True, check=True).stdout.decode().split()
        if [int(x) for x in ours] != ids:
            print(f"TOKENIZER MISMATCH for {p!r}:\n  llama.cpp {ids}\n  troupe    {ours}")
            failures += 1
            continue
        expected, margins = llama_greedy(llm, ids, n, eog)
        failures += compare_logits(troupe, model, llm, ids, expected, discrepancies)
        got = subprocess.run([troupe, "generate", "--model", model, "--prompt", text, "--special", "--print-ids",
                              "--temperature", "0", "--max-tokens", str(n), "--threads", "2", "--quiet"],
                             capture_output=True, check=True).stdout.decode().split()
        got = [int(x) for x in got]
        same = got == expected
        full_length += same and len(expected) == n
        if same:
            print(f"ok   {p!r}: {len(expected)} identical tokens")
            continue
        first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
        tie = margins[first] < TIE
        print(f"{'tie ' if tie else 'DIFF'} {p!r}: identical for {first} tokens, then llama.cpp's top two logits "
              f"differ by {margins[first]:.4f}{' (a tie: accepted)' if tie else ''}")
        if not tie:
            print(f"  llama.cpp {expected}\n  troupe    {got}")
            failures += 1
    mean = float(np.mean(discrepancies))
    print(f"decision margins over {len(discrepancies)} positions: troupe's differ from llama.cpp's by "
          f"{mean:.4f} on average (limit {MEAN_LIMIT}), {max(discrepancies):.4f} at most")
    if mean > MEAN_LIMIT:
        failures += 1
    print(f"{len(PROMPTS) - failures} passed, {failures} failed")
    if full_length < 5:
        print(f"only {full_length} prompts produced {n} identical tokens; at least 5 must")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
