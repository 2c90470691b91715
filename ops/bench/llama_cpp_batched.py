"""llama.cpp decoding N sequences at once (its own continuous-batching
building block: one llama_decode over a batch holding one token of every
sequence), the peer of troupe's aggregate decode through `troupe serve`.
Same GGUF file, same threads, greedy. One JSON line.

usage: llama_cpp_batched.py MODEL.gguf THREADS SEQUENCES PROMPT_TOKENS GEN_TOKENS
"""
import ctypes
import json
import sys
import time

import llama_cpp as L
import numpy as np

SENTENCE = "The quick brown fox jumps over the lazy dog while the server streams tokens to its clients. "


def main():
    path, threads, n_seq, n_prompt, n_gen = sys.argv[1], *map(int, sys.argv[2:6])
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(path.encode(), mp)
    cp = L.llama_context_default_params()
    cp.n_ctx = n_seq * (n_prompt + n_gen + 16)
    cp.n_batch = max(n_prompt, n_seq)
    cp.n_ubatch = max(n_prompt, n_seq)
    cp.n_seq_max = n_seq
    cp.n_threads = threads
    cp.n_threads_batch = threads
    ctx = L.llama_init_from_model(model, cp)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)

    def tokenize(text):
        buf = (L.llama_token * (len(text) + 16))()
        n = L.llama_tokenize(vocab, text.encode(), len(text.encode()), buf, len(buf), False, False)
        return list(buf[:n])

    text = SENTENCE
    while len(tokenize(text)) < n_prompt + n_seq:
        text += SENTENCE
    base = tokenize(text)
    batch = L.llama_batch_init(max(n_prompt, n_seq), 0, 1)

    def fill(entries):  # [(token, pos, seq, wants_logits)]
        batch.n_tokens = len(entries)
        for i, (tok, pos, seq, out) in enumerate(entries):
            batch.token[i] = tok
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = out
        if L.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")

    last = []
    t0 = time.perf_counter()
    for s in range(n_seq):  # distinct prompts, one prefill each
        prompt = base[s:s + n_prompt]
        fill([(t, p, s, p == n_prompt - 1) for p, t in enumerate(prompt)])
        row = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, n_prompt - 1), shape=(n_vocab,))
        last.append(int(np.argmax(row)))
    prefill = time.perf_counter() - t0
    t0 = time.perf_counter()
    for step in range(n_gen):
        fill([(last[s], n_prompt + step, s, True) for s in range(n_seq)])
        for s in range(n_seq):
            row = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, s), shape=(n_vocab,))
            last[s] = int(np.argmax(row))
    decode = time.perf_counter() - t0
    print(json.dumps({"engine": "llama.cpp", "threads": threads, "sequences": n_seq, "prompt_tokens": n_prompt,
                      "gen_tokens": n_gen, "prefill_tok_s": round(n_seq * n_prompt / prefill, 2),
                      "decode_tok_s": round(n_seq * n_gen / decode, 2)}))
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)


if __name__ == "__main__":
    main()
