#!/usr/bin/env python3
"""Which confidence signal, window and threshold should `escalate` use? Measured offline.

Runs every problem on the small tier alone with logprobs (greedy: each token's log-probability
is the small model's top-1 probability), then replays escalation rules on those traces:
the mean over windows of 1 (the single token), 4, 8 and 16 tokens, each at thresholds
0.3 to 0.95. For a rule, a problem that never trips keeps the small model's result and
costs the large tier nothing; one that trips at token s is scored as the large model alone
scored it (an estimate: the large tier really continues the small tier's first s tokens)
and costs the large tier its prompt, those s tokens and the rest of large alone's answer.
Pass/fail and the large tier's answer lengths come from a cascade_bench.py JSON that has
`small` and `large` rows for the same problems.

    cascade_signal.py ENDPOINT BENCH_JSON [--problems N] [--concurrency 8] [--max-tokens 384]
"""
import argparse
import json
import math
import sys
import threading

from troupe_client import Client

import cascade_bench
import humaneval_sandbox


def traces(endpoint, problems, args):
    out = [None] * len(problems)
    todo = iter(range(len(problems)))
    lock = threading.Lock()

    def worker():
        with Client(endpoint, timeout=3600) as c:
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                s = c.generate(problems[i]["prompt"], max_tokens=args.max_tokens, temperature=0,
                               stop=cascade_bench.STOPS, tier="small", logprobs=True)
                s.read()
                out[i] = {"probs": [math.exp(lp) for lp in s.logprobs], "prompt_tokens": s.prompt_tokens}

    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def trip(probs, window, threshold, within=None):
    """The number of tokens written when the window's mean first falls below the threshold
    (only among the first `within` tokens, when given)."""
    total = 0.0
    for i, p in enumerate(probs[:within]):
        total += p
        if i >= window:
            total -= probs[i - window]
        if i + 1 >= window and total < threshold * window:
            return i + 1
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("endpoint")
    ap.add_argument("bench_json")
    ap.add_argument("--problems", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=384)
    args = ap.parse_args()
    bench = json.load(open(args.bench_json))
    rows = {r["name"]: r for r in bench["rows"]}
    if "small" not in rows or "large" not in rows:
        sys.exit("cascade_signal: the bench JSON needs small and large rows")
    small, large = rows["small"]["records"], rows["large"]["records"]
    n = min(len(small), len(large), args.problems or len(small))
    problems = list(humaneval_sandbox.read_problems().values())[:n]
    got = traces(args.endpoint, problems, args)
    large_cost = sum(got[i]["prompt_tokens"] + large[i]["completion_tokens"] for i in range(n))
    large_pass = sum(bool(large[i]["passed"]) for i in range(n))
    print(f"{n} problems: small alone {sum(bool(small[i]['passed']) for i in range(n))}, "
          f"large alone {large_pass}; large alone's cost {large_cost} forward tokens (estimated)")
    print("| window | within | threshold | escalated | pass@1 (est.) | % of large's pass@1 | large forward tokens (est., % of large alone) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    results = []
    for window, within in ((1, None), (4, None), (8, None), (16, None), (1, 8), (4, 16), (4, 32), (8, 32)):
        for threshold in (0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95):
            passed = cost = escalated = 0
            for i in range(n):
                s = trip(got[i]["probs"], window, threshold, within)
                if s is None:
                    passed += bool(small[i]["passed"])
                    continue
                escalated += 1
                passed += bool(large[i]["passed"])
                cost += got[i]["prompt_tokens"] + s + max(large[i]["completion_tokens"] - s, 1)
            results.append((window, within, threshold, escalated, passed, cost))
            print(f"| {window} | {within or 'all'} | {threshold} | {escalated} | {passed / n:.3f} | {100 * passed / max(large_pass, 1):.0f} % "
                  f"| {100 * cost / large_cost:.0f} % |")
    json.dump({"problems": n, "traces": got, "results": results}, open("/tmp/troupe-cascade-signal.json", "w"))


if __name__ == "__main__":
    main()
