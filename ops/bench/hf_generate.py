#!/usr/bin/env python3
"""The peer of troupe's CUDA benchmark: HF transformers `generate` on the same
shapes (Qwen2.5-0.5B / 1.5B, random bf16 weights), on the same GPU, in the
same run. Prints one JSON line per batch size, plus the device copy bandwidth
that bounds batch-1 decode.

    hf_generate.py SHAPE BATCHES PROMPT NEW_TOKENS     e.g. q05 1,16,64,256 128 32
"""
import json
import sys
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

SHAPES = {
    "q05": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                intermediate_size=4864),
    "q15": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                intermediate_size=8960),
}


def copy_bandwidth():
    """Bytes read + written per second by a large device-to-device copy (the batch-1 decode ceiling)."""
    a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    torch.cuda.synchronize()
    return 2 * a.numel() * 10 / (time.perf_counter() - t)


def main():
    shape, batches, prompt, new = sys.argv[1], [int(b) for b in sys.argv[2].split(",")], int(sys.argv[3]), int(sys.argv[4])
    cfg = Qwen2Config(**SHAPES[shape], vocab_size=151936, max_position_embeddings=4096, rope_theta=1e6,
                      tie_word_embeddings=True)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16).eval()
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"engine": "device", "copy_bytes_per_s": copy_bandwidth(), "shape": shape,
                      "hf_params": params}), flush=True)
    for batch in batches:
        ids = torch.randint(0, cfg.vocab_size, (batch, prompt), device="cuda")
        mask = torch.ones_like(ids)
        with torch.no_grad():
            model(ids[:, :16])  # warm up
            model.generate(ids[:, :16], attention_mask=mask[:, :16], max_new_tokens=2, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            t = time.perf_counter()
            model(ids, attention_mask=mask)
            torch.cuda.synchronize()
            prefill = time.perf_counter() - t
            t = time.perf_counter()
            model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                           pad_token_id=0)
            torch.cuda.synchronize()
            total = time.perf_counter() - t
        decode = max(total - prefill, 1e-9)
        print(json.dumps({"engine": "hf-transformers", "shape": shape, "batch": batch, "prompt_tokens": prompt,
                          "gen_tokens": new, "prefill_tok_s": batch * prompt / prefill,
                          "decode_tok_s": batch * new / decode}), flush=True)


if __name__ == "__main__":
    main()
