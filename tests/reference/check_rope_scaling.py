"""Checks troupe's RoPE scaling against the NumPy reference of each formula.

usage: check_rope_scaling.py TROUPE_BINARY WORKDIR TOLERANCE

Linear and YaRN come from a file's rope.scaling.* metadata (written by
`troupe make-model --rope-scaling ...`); NTK-aware and YaRN also as the
override flags `--rope-scaling T --rope-factor F [--rope-orig-ctx N]` on a file
without any. For each, `troupe logits` over 300 random tokens (past the
original context YaRN is given, so that every frequency band is exercised)
must match tests/reference/forward.py with that scaling within TOLERANCE
(max |troupe - reference| / max |reference|), and differ from the unscaled
reference by far more, so that a scaling silently ignored fails.
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forward import ReferenceModel  # noqa: E402

SHAPE = ["--layers", "2", "--embd", "256", "--heads", "4", "--kv-heads", "2", "--ff", "512", "--seed", "17", "--untied"]
# (name, make-model metadata flags, troupe logits override flags, the reference's scaling)
CASES = [
    ("linear x4 (file)", ["--rope-scaling", "linear", "--rope-factor", "4"], [], {"type": "linear", "factor": 4.0}),
    ("yarn x4 orig 128 (file)", ["--rope-scaling", "yarn", "--rope-factor", "4", "--rope-orig-ctx", "128"], [],
     {"type": "yarn", "factor": 4.0, "orig_ctx": 128}),
    ("ntk x4 (flags)", [], ["--rope-scaling", "ntk", "--rope-factor", "4"], {"type": "ntk", "factor": 4.0}),
    ("yarn x8 orig 64 (flags)", [], ["--rope-scaling", "yarn", "--rope-factor", "8", "--rope-orig-ctx", "64"],
     {"type": "yarn", "factor": 8.0, "orig_ctx": 64}),
    ("yarn x4 (flags over the file's linear)", ["--rope-scaling", "linear", "--rope-factor", "2"],
     ["--rope-scaling", "yarn", "--rope-factor", "4", "--rope-orig-ctx", "128"],
     {"type": "yarn", "factor": 4.0, "orig_ctx": 128}),
]


def relative(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def main():
    troupe, workdir, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
    os.makedirs(workdir, exist_ok=True)
    failed = False
    for i, (name, meta, flags, scaling) in enumerate(CASES):
        model = os.path.join(workdir, f"rope-{i}.gguf")
        subprocess.run([troupe, "make-model", "--out", model, "--type", "F32", *SHAPE, *meta], check=True,
                       stderr=subprocess.DEVNULL)
        plain = ReferenceModel(model, rope_scaling=None)
        tokens = np.random.default_rng(i).integers(0, plain.w["token_embd.weight"].shape[0], size=300).tolist()
        expected = ReferenceModel(model, rope_scaling=scaling).logits(tokens)
        unscaled = plain.logits(tokens)
        out = os.path.join(workdir, f"rope-{i}.f32")
        subprocess.run([troupe, "logits", "--model", model, "--tokens", " ".join(map(str, tokens)), "--out", out,
                        "--chunk", "64", "--threads", "2", *flags], check=True)
        got = np.fromfile(out, dtype=np.float32).reshape(expected.shape)
        err, apart = relative(got, expected), relative(unscaled, expected)
        ok = err <= tol and apart > 10 * tol
        print(f"{name}: relative error {err:.2e} (tolerance {tol:.0e}); unscaled is {apart:.2e} away"
              f"{'' if ok else '  FAILED'}")
        failed |= not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
