#!/usr/bin/env python3
"""Driver of ops/bench/suffix.sh: runs one workload (suffix_workloads.py) on a
server with one speculation mode and prints a JSON row; with --summary ROWS,
the table (rate, ratio to off and to the best of off and ngram, acceptance
per source, tokens equal to off's, the trees' memory).

    suffix_bench.py ENDPOINT WORKLOAD MODE TOKENS MAX_DRAFT
    suffix_bench.py --summary ROWS.jsonl

Rates: job, the job's completion tokens over its wall time (submission to
its last result: prefill included, as a nightly job's owner sees it);
coding, agent and chat, decode tok/s of requests 2..N (the first has no
history), from each request's per-token time.
"""
import json
import os
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

import suffix_workloads as wl  # noqa: E402


def request_row(s):
    text = s.read()
    spec = s.speculation or {}
    return {"text": text, "tokens": list(s.tokens), "per_token_ms": s.timings["per_token_ms"],
            "drafted": spec.get("drafted", 0), "accepted": spec.get("accepted", 0)}


def run_job(c, tokens, max_draft):
    items = wl.document_sections()
    t0 = time.monotonic()
    job_id = c.submit_job(items, wl.JOB_TEMPLATE, max_tokens=tokens, temperature=0,
                          constraint={"json_schema": wl.SUMMARY_SCHEMA})["job_id"]
    while c.job_status(job_id)["state"] == "running":
        time.sleep(0.2)
    wall = time.monotonic() - t0
    results = sorted(c.job_results(job_id), key=lambda r: r["index"])
    done = sum(r["completion_tokens"] for r in results)
    return {"rate": done / wall, "wall_s": wall, "outputs": [r["text"] for r in results],
            "valid": sum(r["validated"] for r in results), "items": len(results)}


def decode_rate(rows):
    later = rows[1:]
    return 1000.0 * len(later) / sum(q["per_token_ms"] for q in later) if later else 0.0


def run_coding(c, tokens, max_draft, mode):
    rows = [request_row(c.chat([("user", t)], session_id="coding", max_tokens=tokens, temperature=0,
                               speculation=mode, max_draft=max_draft, context_policy="window"))
            for t in wl.coding_turns()]
    return {"rate": decode_rate(rows), "outputs": [r["tokens"] for r in rows]}


def run_agent(c, tokens, max_draft, mode):
    history = [{"role": "system", "content": "You are a travel agent. Use the tools for every request."}]
    rows = []
    for task in wl.agent_tasks():
        history.append({"role": "user", "content": task})
        s = c.chat(history, max_tokens=tokens, temperature=0, speculation=mode, max_draft=max_draft, tools=wl.TOOLS,
                   tool_choice="required")
        rows.append(request_row(s))
        if s.finish_reason != "tool_calls":  # cut at max_tokens: its text, no call
            history.append({"role": "assistant", "content": rows[-1]["text"]})
            continue
        history.append({"role": "assistant", "content": "", "tool_calls": s.tool_calls})
        for call in s.tool_calls:
            history.append({"role": "tool", "tool_call_id": call["id"], "content": wl.tool_result(call)})
    return {"rate": decode_rate(rows), "outputs": [r["tokens"] for r in rows]}


def run_chat(c, tokens, max_draft, mode):
    rows = [request_row(c.chat([("user", q)], max_tokens=tokens, temperature=0, speculation=mode,
                               max_draft=max_draft)) for q in wl.QUESTIONS]
    return {"rate": decode_rate(rows), "outputs": [r["tokens"] for r in rows]}


def run(endpoint, workload, mode, tokens, max_draft):
    from troupe_client import Client
    with Client(endpoint, timeout=3600) as c:
        # A job's items take the server's speculation (serve --speculation MODE).
        row = run_job(c, tokens, max_draft) if workload.startswith("job") else \
            {"coding": run_coding, "agent": run_agent, "chat": run_chat}[workload](c, tokens, max_draft, mode)
        st = c.stats()
    row.update({"workload": workload, "mode": mode, "speculation": st["speculation"],
                "tree_bytes": st["suffix_tree_bytes"], "tree_tokens": st["suffix_tree_tokens"],
                "trees": st["suffix_trees"]})
    print(json.dumps(row))


def acceptance(row):
    """Per source: accepted / drafted and accepted tokens a window."""
    parts = []
    for source, s in sorted(row["speculation"].items()):
        if s["drafted"]:
            parts.append(f"{source} {s['accepted'] / s['drafted']:.2f}, {s['accepted'] / max(1, s['windows']):.1f}/w")
    return "; ".join(parts) or "-"


def summary(path):
    rows = [json.loads(line) for line in open(path)]
    by = {(r["workload"], r["mode"]): r for r in rows}
    print("| workload | mode | tok/s | vs off | vs best of off, ngram | acceptance, tokens a window (by source) | "
          "same as off | trees: tokens, bytes a token |")
    print("| --- | --- | ---: | ---: | ---: | --- | --- | --- |")
    for r in rows:
        # A run without off (or ngram) among its modes leaves those columns empty.
        off = by.get((r["workload"], "off"))
        peers = [x["rate"] for x in (off, by.get((r["workload"], "ngram"))) if x]
        vs_off = f"{r['rate'] / off['rate']:.2f}x" if off else "-"
        vs_best = f"{r['rate'] / max(peers):.2f}x" if peers else "-"
        same = "yes" if off and r["outputs"] == off["outputs"] else "NO" if off else "-"
        trees = f"{r['tree_tokens']}, {r['tree_bytes'] / r['tree_tokens']:.0f}" if r["tree_tokens"] else "-"
        extra = f" ({r['valid']}/{r['items']} valid)" if "valid" in r else ""
        print(f"| {r['workload']}{extra} | {r['mode']} | {r['rate']:.1f} | {vs_off} | {vs_best} | {acceptance(r)} | "
              f"{same} | {trees} |")


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        summary(sys.argv[2])
    else:
        run(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
