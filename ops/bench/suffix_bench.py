#!/usr/bin/env python3
"""Driver of ops/bench/suffix.sh: runs one workload's requests in order on a
server, one at a time, with one speculation mode, and prints a JSON row; with
--summary ROWS, the table (decode tok/s over requests 2..N, ratio to off,
tokens equal to off's).

    suffix_bench.py ENDPOINT WORKLOAD MODE TOKENS MAX_DRAFT
    suffix_bench.py --summary ROWS.jsonl
"""
import glob
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

INSTRUCTION = ("Summarize this paper for a reading list. Answer in exactly this format:\n"
               "Title: <title>\nProblem: <one sentence>\nMethod: <one sentence>\nResult: <one sentence>\n\n")
QUESTIONS = ["Why is the sky blue?", "Write a haiku about autumn rain.", "What makes a good API error message?",
             "Explain recursion to a child.", "Give three tips for a job interview.",
             "What is the difference between a list and a tuple in Python?", "Describe a sunrise over the sea.",
             "How do vaccines train the immune system?", "Plan a three-day trip to Kyoto.",
             "What is a hash collision?"]


def requests(workload):
    if workload == "job":
        papers = sorted(glob.glob(os.path.join(ROOT, "examples", "summarize-papers", "papers", "*.txt")))
        return [INSTRUCTION + open(p).read() for p in papers]
    return list(QUESTIONS)


def run(endpoint, workload, mode, tokens, max_draft):
    from troupe_client import Client
    rows = []
    with Client(endpoint, timeout=900) as c:
        for text in requests(workload):
            s = c.chat([("user", text)], max_tokens=tokens, temperature=0, speculation=mode, max_draft=max_draft)
            s.read()
            spec = s.speculation or {}
            rows.append({"tokens": list(s.tokens), "per_token_ms": s.timings["per_token_ms"],
                         "drafted": spec.get("drafted", 0), "accepted": spec.get("accepted", 0),
                         "windows": spec.get("windows", 0)})
    print(json.dumps({"workload": workload, "mode": mode, "requests": rows}))


def summary(path):
    rows = [json.loads(line) for line in open(path)]
    off = {r["workload"]: r for r in rows if r["mode"] == "off"}
    print("| workload | mode | decode tok/s (requests 2..N) | vs off | accepted / drafted | accepted a window | "
          "tokens equal off's |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        later = r["requests"][1:]
        rate = 1000.0 * len(later) / sum(q["per_token_ms"] for q in later)
        base = off[r["workload"]]
        base_rate = 1000.0 * len(base["requests"][1:]) / sum(q["per_token_ms"] for q in base["requests"][1:])
        same = all(a["tokens"] == b["tokens"] for a, b in zip(r["requests"], base["requests"]))
        drafted = sum(q.get("drafted", 0) for q in r["requests"])
        accepted = sum(q.get("accepted", 0) for q in r["requests"])
        windows = sum(q.get("windows", 0) for q in r["requests"])
        acceptance = f"{accepted / drafted:.2f}" if drafted else "-"
        per_window = f"{accepted / windows:.2f}" if windows else "-"
        print(f"| {r['workload']} | {r['mode']} | {rate:.1f} | {rate / base_rate:.2f}x | {acceptance} | {per_window} | "
              f"{'yes' if same else 'NO'} |")


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        summary(sys.argv[2])
    else:
        run(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
