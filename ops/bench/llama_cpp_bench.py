"""llama.cpp's prefill and decode speed on a GGUF file, measured the way
`troupe bench` measures troupe: the same prompt text, prefill in one batch,
greedy decode of a fixed number of tokens, best of N runs. One JSON line.

usage: llama_cpp_bench.py MODEL.gguf THREADS PROMPT_TOKENS GEN_TOKENS REPEAT
"""
import json
import sys
import time

import numpy as np
from llama_cpp import Llama

SENTENCE = "The quick brown fox jumps over the lazy dog while the server streams tokens to its clients. "


def main():
    path, threads, n_prompt, n_gen, repeat = sys.argv[1], *map(int, sys.argv[2:6])
    llm = Llama(model_path=path, n_ctx=n_prompt + n_gen + 16, n_threads=threads, n_threads_batch=threads,
                n_batch=n_prompt, n_ubatch=n_prompt, logits_all=False, verbose=False)
    text = SENTENCE
    while len(llm.tokenize(text.encode(), add_bos=False)) < n_prompt:
        text += SENTENCE
    prompt = llm.tokenize(text.encode(), add_bos=False)[:n_prompt]
    best_prefill = best_decode = float("inf")
    llm.reset()
    llm.eval(prompt[:16])  # warm up
    for _ in range(repeat):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        best_prefill = min(best_prefill, time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(n_gen):
            # Without logits_all, llama-cpp-python keeps no scores: read the last row from the context.
            last = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))
            token = int(np.argmax(last))
            llm.eval([token])
        best_decode = min(best_decode, time.perf_counter() - t0)
    print(json.dumps({"engine": "llama.cpp", "threads": threads, "prompt_tokens": n_prompt, "gen_tokens": n_gen,
                      "prefill_tok_s": round(n_prompt / best_prefill, 2),
                      "decode_tok_s": round(n_gen / best_decode, 2)}))


if __name__ == "__main__":
    main()
