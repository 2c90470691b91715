"""Checks troupe's forward pass against the NumPy reference on a synthetic model.

usage: check_forward.py TROUPE_BINARY WORKDIR TYPE TOLERANCE [ARCH]

Makes a synthetic model of the given weight format with `troupe make-model`,
asks `troupe logits` for the logits of a token sequence (in one forward, in
chunks of 5 and one token at a time), and compares both with tests/reference/forward.py. The error
measure is max |troupe - reference| / max |reference| over all positions.
For gemma3, bloom, mpt and the two mixtures of experts in F32 and Q8_0, llama.cpp (llama-cpp-python) must meet
the same tolerance on the same file, which ties the reference's sliding window and
layer pattern, and its ALiBi slopes and fused QKV, to llama.cpp's.
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forward import ReferenceModel  # noqa: E402

ROUTE_TIE = 0.005  # probability gap between the last chosen expert and the first left out


def main():
    troupe, workdir, qtype, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    arch = sys.argv[5] if len(sys.argv) > 5 else "qwen2"
    os.makedirs(workdir, exist_ok=True)
    model = os.path.join(workdir, f"ref-{arch}-{qtype}.gguf")
    # gemma3: six layers (five sliding-window, the sixth global) and a window
    # of 8, so that 40 tokens are below, at and well beyond it.
    # bloom: 12 heads, not a power of two, so the interleaved ALiBi slopes are used.
    shape = {"gemma3": ["--layers", "6", "--window", "8", "--embd", "256", "--heads", "4", "--kv-heads", "2"],
             "bloom": ["--layers", "2", "--embd", "768", "--heads", "12", "--kv-heads", "4"],
             # mpt: 6 heads (not a power of two), and a clamp that cuts some of Q, K and V.
             "mpt": ["--layers", "2", "--embd", "768", "--heads", "6", "--kv-heads", "6", "--clamp-kqv", "1.5"],
             # qwen2moe: 8 experts, top-2, and a shared expert; mixtral: llama with 4 experts, top-2.
             "qwen2moe": ["--layers", "2", "--embd", "256", "--heads", "4", "--kv-heads", "2", "--experts", "8",
                          "--experts-used", "2", "--expert-ff", "256", "--shared-expert-ff", "512"],
             "mixtral": ["--layers", "2", "--embd", "256", "--heads", "4", "--kv-heads", "2", "--experts", "4",
                         "--experts-used", "2"]}.get(
        arch, ["--layers", "2", "--embd", "256", "--heads", "4", "--kv-heads", "2"])
    file_arch = "llama" if arch == "mixtral" else arch
    subprocess.run([troupe, "make-model", "--out", model, "--type", qtype, "--arch", file_arch, *shape, "--ff", "512",
                    "--seed", "11", "--untied"], check=True)
    ref = ReferenceModel(model)
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, ref.w["token_embd.weight"].shape[0], size=40 if arch in ("gemma3", "bloom", "mpt", "qwen2moe", "mixtral") else 23).tolist()
    expected = ref.logits(tokens)
    # A mixture of experts is discontinuous where its router nearly ties: with 8-bit activations
    # (quantized formats) a chosen expert within 0.5 % probability of the first left out may be
    # swapped for it, by troupe and llama.cpp alike. Those positions are left out of the measure.
    kept = np.ones(len(tokens), dtype=bool)
    if qtype not in ("F32", "F16", "BF16"):
        kept = ref.route_margin >= ROUTE_TIE
        if not kept.all():
            print(f"{int((~kept).sum())} of {len(tokens)} positions left out: a router tie under {ROUTE_TIE}")
    worst = 0.0
    for chunk in (0, 5, 1):  # one pass, prefill chunks, one token a step (decode)
        out = os.path.join(workdir, f"logits-{arch}-{qtype}-{chunk}.f32")
        subprocess.run([troupe, "logits", "--model", model, "--tokens", " ".join(map(str, tokens)), "--out", out,
                        "--chunk", str(chunk), "--threads", "2"], check=True)
        got = np.fromfile(out, dtype=np.float32).reshape(expected.shape)
        err = float(np.abs(got - expected)[kept].max() / np.abs(expected).max())
        agree = float((got.argmax(-1) == expected.argmax(-1)).mean())
        print(f"{arch} {qtype} chunk={chunk}: relative error {err:.2e} (tolerance {tol:.0e}), argmax agreement {agree:.2f}")
        worst = max(worst, err)
    # llama.cpp runs the same file: its window, layer pattern and ALiBi are the reference's too.
    # F32, and Q8_0 with its 8-bit activations (not BF16: llama.cpp rounds activations to bf16).
    if arch in ("gemma3", "bloom", "mpt", "qwen2moe", "mixtral") and qtype in ("F32", "Q8_0"):
        from llama_cpp import Llama
        llm = Llama(model_path=model, n_ctx=64, n_threads=2, n_batch=64, logits_all=True, verbose=False)
        llm.eval(tokens)
        theirs = np.array(llm.scores[:len(tokens)])
        err = float(np.abs(theirs - expected)[kept].max() / np.abs(expected).max())
        print(f"llama.cpp on the same file: relative error {err:.2e} against the reference")
        worst = max(worst, err)
    if worst > tol:
        print("FAILED: error above tolerance")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
