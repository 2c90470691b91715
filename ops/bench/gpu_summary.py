#!/usr/bin/env python3
"""Merges ops/gpu-check.sh's JSON lines (troupe bench, HF transformers, copy
bandwidth) into one results JSON and a table with the issue's ratios:
batch-1 decode against the BF16 weight-streaming roofline, troupe against HF.

    gpu_summary.py RESULTS_DIR
"""
import glob
import json
import os
import sys

# Bytes a BF16 decode step must stream: every weight once (embeddings tied).
PARAMS = {"q05": 896 * 151936 + 24 * (896 * (896 + 2 * 128) + 896 * 896 + 3 * 896 * 4864),
          "q15": 1536 * 151936 + 28 * (1536 * (1536 + 2 * 256) + 1536 * 1536 + 3 * 1536 * 8960)}


def main():
    out = sys.argv[1]
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    r = json.loads(line)
                    r.setdefault("shape", os.path.basename(path).split("-")[0])
                    rows.append(r)
    copy = max((r["copy_bytes_per_s"] for r in rows if r["engine"] == "device"), default=None)
    hf = {(r["shape"], r["batch"]): r for r in rows if r["engine"] == "hf-transformers"}
    table = []
    for r in rows:
        if r["engine"] != "troupe":
            continue
        peer = hf.get((r["shape"], r["batch"]))
        entry = dict(shape=r["shape"], weights=r["weights"], batch=r["batch"], prefill_tok_s=r["prefill_tok_s"],
                     decode_tok_s=r["decode_tok_s"])
        if peer:
            entry["hf_prefill_tok_s"] = peer["prefill_tok_s"]
            entry["hf_decode_tok_s"] = peer["decode_tok_s"]
            entry["decode_vs_hf"] = r["decode_tok_s"] / peer["decode_tok_s"]
            entry["prefill_vs_hf"] = r["prefill_tok_s"] / peer["prefill_tok_s"]
        if copy and r["batch"] == 1:
            roofline = copy / (2 * PARAMS[r["shape"]])
            entry["bf16_roofline_tok_s"] = roofline
            entry["decode_vs_bf16_roofline"] = r["decode_tok_s"] / roofline
        table.append(entry)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"copy_bytes_per_s": copy, "results": table}, f, indent=1)
    if copy:
        print(f"device copy: {copy / 1e12:.2f} TB/s")
    print(f"{'shape':5} {'weights':7} {'batch':>5} {'prefill':>10} {'decode':>9} {'HF dec':>8} {'vs HF':>6} {'roofline':>8}")
    for e in table:
        print(f"{e['shape']:5} {e['weights']:7} {e['batch']:>5} {e['prefill_tok_s']:>10.0f} {e['decode_tok_s']:>9.0f} "
              f"{e.get('hf_decode_tok_s', 0):>8.0f} {e.get('decode_vs_hf', 0):>6.1f} "
              f"{e.get('decode_vs_bf16_roofline', 0):>8.2f}")


if __name__ == "__main__":
    main()
