"""What structured_bench.py writes as it goes: each record a JSON line on stdout and in
OUT/results.jsonl, outputs in OUT/*.jsonl, progress on stderr."""
import json
import os
import sys

RESULTS = []
# Set by structured_bench.py's main once the flags are read; the parts read it as
# structured_results.OUT_DIR, since a name imported before then would stay None.
OUT_DIR = None


def emit(rec):
    RESULTS.append(rec)
    line = json.dumps(rec)
    print(line, flush=True)
    if OUT_DIR:
        with open(os.path.join(OUT_DIR, "results.jsonl"), "a") as f:
            f.write(line + "\n")


def save(name, rec):
    with open(os.path.join(OUT_DIR, name), "a") as f:
        f.write(json.dumps(rec) + "\n")


def log(msg):
    print(f"[structured] {msg}", file=sys.stderr, flush=True)
