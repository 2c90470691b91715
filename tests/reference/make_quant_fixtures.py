#!/usr/bin/env python3
"""Writes tests/fixtures/quants/<TYPE>.bin: random but valid blocks of each
weight format and the floats gguf-py decodes them to. tests/engine/quants.test.cpp
decodes the same bytes with troupe and requires the very same floats, so the
block layouts are checked against an implementation written by others.

File layout (little-endian): b"TQF1", u32 ggml type, u32 value count,
u32 byte count, the block bytes, then the values as float32.

Run with a Python that has numpy and gguf:  python make_quant_fixtures.py [out_dir]
"""
import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import quants

# Byte offsets of the f16 fields inside one block: random bytes there could be
# NaN or infinity, which would make the comparison meaningless.
F16_FIELDS = {
    T.Q4_0: [0],
    T.Q5_0: [0],
    T.Q8_0: [0],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}
BLOCKS = 8


def random_f16(rng, n):
    # Magnitudes from tiny (subnormal) to large, both signs.
    mags = 2.0 ** rng.uniform(-20, 6, n)
    return (mags * rng.choice([-1.0, 1.0], n)).astype(np.float16)


def quantized(rng, qtype):
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(BLOCKS, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = random_f16(rng, BLOCKS).view(np.uint8).reshape(BLOCKS, 2)
    return raw, BLOCKS * block_elems


def halves(rng, qtype):
    n = 256
    if qtype == T.F16:
        v = random_f16(rng, n)
        # Edge values: zeros, the largest half, the smallest subnormal, infinity.
        v[:6] = np.array([0.0, -0.0, 65504.0, -65504.0, 2.0 ** -24, np.inf], dtype=np.float16)
        return v.view(np.uint8).reshape(1, -1), n
    bits = rng.normal(0, 3, n).astype(np.float32).view(np.uint32) >> 16
    bits[:3] = [0x0000, 0x8000, 0x0001]  # zero, -zero, a subnormal
    return bits.astype(np.uint16).view(np.uint8).reshape(1, -1), n


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "fixtures" / "quants"
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20240611)
    for qtype in [T.F16, T.BF16, T.Q4_0, T.Q5_0, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K]:
        raw, n = halves(rng, qtype) if qtype in (T.F16, T.BF16) else quantized(rng, qtype)
        values = np.asarray(quants.dequantize(raw, qtype), dtype=np.float32).reshape(-1)
        assert values.size == n
        data = raw.tobytes()
        header = b"TQF1" + struct.pack("<III", int(qtype), n, len(data))
        (out / f"{qtype.name}.bin").write_bytes(header + data + values.astype("<f4").tobytes())
        print(f"{qtype.name}: {n} values, {len(data)} bytes")


if __name__ == "__main__":
    main()
