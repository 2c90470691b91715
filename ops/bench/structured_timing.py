"""structured_bench.py's part `timing`: `troupe grammar`'s compile time per schema and its
masks per token of troupe's valid outputs, the first time and cached."""
import os
import subprocess

from benchlib import med, pct
from structured_results import emit
from structured_schemas import troupe_compile, troupe_masks


def part_timing(args, chosen, outputs, gguf, model):
    walls = [s["compile_wall_s"] * 1000 for s in chosen]
    empty = os.path.join(os.path.dirname(chosen[0]["path"]), "empty.json")
    with open(empty, "w") as f:
        f.write("{}")
    process = med([troupe_compile(args, empty)[1] * 1000 for _ in range(5)])  # the process alone, near enough
    first_us, cold, warm, failures = [], [], [], []
    for s, r in zip(chosen, outputs or [None] * len(chosen)):
        toks = (r or {}).get("tokens") if r and r.get("valid") else None
        prefixes = [[]] if not toks else [toks[:i] for i in range(len(toks) + 1)]
        try:
            got = troupe_masks(args, s["path"], gguf, prefixes + (prefixes if toks else []))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            failures.append(f"{s['file']}: {e}")
            continue
        first_us.append(got[0]["us"])
        if toks:
            half = len(prefixes)
            if any(g["taken"] != len(p) for g, p in zip(got, prefixes)):
                failures.append(f"{s['file']}: troupe grammar refused a token of troupe's own output")
            cold += [g["us"] for g in got[1:half]]
            warm += [g["us"] for g in got[half + 1:]]
    rec = {"part": "timing", "model": model, "schemas": len(chosen),
           "compile_wall_ms": {"median": med(walls), "p99": pct(walls, 99), "max": max(walls, default=None)},
           "process_wall_ms_schema_empty": process,
           "first_mask_us": {"median": med(first_us), "p99": pct(first_us, 99)},
           "mask_us_first_time": {"median": med(cold), "p99": pct(cold, 99), "tokens": len(cold)},
           "mask_us_cached": {"median": med(warm), "p99": pct(warm, 99), "tokens": len(warm)},
           "failures": failures[:10]}
    emit(rec)
    return rec
