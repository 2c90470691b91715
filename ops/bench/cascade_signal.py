#!/usr/bin/env python3
"""Which confidence rule should `escalate` use? Measured offline, from one bench run.

Reads a cascade_bench.py JSON with `small` and `large` rows for the same problems. The small
row carries each token's log-probability (cascade_bench.py asks for them; greedy: the small
model's top-1 probability). When it does not (an older JSON), --endpoint collects them again
from a running `troupe serve --tiers`.

Two families of rules are replayed on those traces:
- **switch** (`--escalate-hold 0`): a window of W tokens slides over the answer's first N; the
  first time its mean probability falls below τ, the large tier continues from there. The
  large tier's result is *estimated* as large alone's (it really continues the small tier's
  first tokens).
- **hold** (`--escalate-hold N`): the answer's first N tokens are held back and judged
  together: escalate when their summary (the minimum, the mean, or the geometric mean of
  their probabilities) falls below τ. An escalated request has sent nothing, so the large
  tier writes the whole answer: its result and cost are exactly large alone's.

A problem that does not escalate keeps the small tier's result and costs the large tier
nothing; one that does costs its prompt plus the tokens the large tier writes.

Picking the best of many rules on the same problems it is scored on flatters it. --splits K
picks each rule's threshold on a random half of the problems and scores it on the other half,
K times.

    cascade_signal.py BENCH_JSON [--endpoint EP] [--problems N] [--quality 0.97] [--splits K]
"""
import argparse
import json
import math
import random
import sys

import benchlib
import cascade_bench
import humaneval_sandbox

# Coarse where no rule lives, fine (0.01) where the useful ones do.
THRESHOLDS = tuple(round(0.05 * k, 2) for k in range(2, 13)) + tuple(round(0.01 * k, 2) for k in range(61, 96))


def traces(endpoint, problems, args):
    out = [None] * len(problems)

    def one(c, i):
        s = c.generate(problems[i]["prompt"], max_tokens=args.max_tokens, temperature=0,
                       stop=cascade_bench.STOPS, tier="small", logprobs=True)
        s.read()
        out[i] = {"logprobs": list(s.logprobs), "prompt_tokens": s.prompt_tokens}

    benchlib.each_with_client(endpoint, len(problems), args.concurrency, one)
    return out


def switch_at(probs, window, threshold, within):
    """The number of tokens written when the window's mean first falls below the threshold
    (only among the first `within` tokens; 0: anywhere), or None."""
    total = 0.0
    for i, p in enumerate(probs[:within or None]):
        total += p
        if i >= window:
            total -= probs[i - window]
        if i + 1 >= window and total < threshold * window:
            return i + 1
    return None


def summary(probs, how):
    if not probs:
        return 1.0
    if how == "min":
        return min(probs)
    if how == "mean":
        return sum(probs) / len(probs)
    return math.exp(sum(math.log(max(p, 1e-12)) for p in probs) / len(probs))  # geometric


def rules():
    for window, within in ((1, 8), (1, 16), (4, 16), (4, 32), (8, 32), (8, 0)):
        for t in THRESHOLDS:
            yield ("switch", f"window {window}, within {within or 'all'}", t,
                   lambda probs, w=window, n=within, t=t: switch_at(probs, w, t, n))
    for hold in (8, 16, 24, 32, 48, 64, 0):
        for how in ("min", "mean", "geo"):
            for t in THRESHOLDS:
                yield ("hold", f"hold {hold or 'all'}, {how}", t,
                       lambda probs, h=hold, how=how, t=t:
                       0 if summary(probs[:h or None], how) < t else None)


def score(rule, cases):
    """(passed, escalated, large-tier cost) of a rule over the cases."""
    passed = escalated = cost = 0
    for c in cases:
        s = rule(c["probs"])
        if s is None:
            passed += c["small_passed"]
            continue
        escalated += 1
        passed += c["large_passed"]
        cost += c["prompt_tokens"] + s + max(c["large_tokens"] - s, 1)
    return passed, escalated, cost


def held_out(cases, args):
    """For each rule (all thresholds of it), over random halves of the problems: the cheapest
    threshold that keeps `quality` of large alone's passes on one half, scored on the other.
    Prints the mean share of large's passes and of its cost there, and how often the share
    reached `quality`."""
    rng = random.Random(args.seed)
    by_rule = {}
    for family, name, t, rule in rules():
        by_rule.setdefault((family, name), []).append((t, rule))
    splits = []
    for _ in range(args.splits):
        order = list(range(len(cases)))
        rng.shuffle(order)
        half = len(cases) // 2
        splits.append(([cases[i] for i in order[:half]], [cases[i] for i in order[half:]]))
    print(f"\nHeld out ({args.splits} random halves): each rule's threshold picked on one half as the "
          f"cheapest keeping {args.quality:.0%} of large's passes, then scored on the other")
    print("| family | rule | median τ picked | % of large's passes (mean) | reached the share | cost (% of large alone, mean) |")
    print("| --- | --- | --- | --- | --- | --- |")
    rows = []
    for (family, name), variants in by_rule.items():
        quality = cost = reached = 0.0
        picked = []
        for pick, other in splits:
            need = args.quality * sum(c["large_passed"] for c in pick)
            scored = [(t, rule, score(rule, pick)) for t, rule in variants]
            ok = [x for x in scored if x[2][0] >= need] or [max(scored, key=lambda x: x[2][0])]
            t, rule, _ = min(ok, key=lambda x: x[2][2])
            passed, _, spent = score(rule, other)
            share = passed / max(sum(c["large_passed"] for c in other), 1)
            quality += share
            reached += share >= args.quality
            cost += spent / sum(c["prompt_tokens"] + c["large_tokens"] for c in other)
            picked.append(t)
        n = len(splits)
        rows.append((cost / n, family, name, sorted(picked)[n // 2], quality / n, reached / n))
    for cost, family, name, t, quality, reached in sorted(rows, key=lambda r: -r[4]):
        print(f"| {family} | {name} | {t} | {100 * quality:.1f} % | {100 * reached:.0f} % of halves | {100 * cost:.1f} % |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench_json")
    ap.add_argument("--endpoint", help="collect the small tier's logprobs here (older JSONs)")
    ap.add_argument("--problems", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("--quality", type=float, default=0.97, help="share of large alone's passes to keep")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--splits", type=int, default=0,
                    help="random halves: each rule's threshold picked on one, scored on the other")
    args = ap.parse_args()
    bench = json.load(open(args.bench_json))
    rows = {r["name"]: r for r in bench["rows"]}
    if "small" not in rows or "large" not in rows:
        sys.exit("cascade_signal: the bench JSON needs small and large rows")
    small, large = rows["small"]["records"], rows["large"]["records"]
    n = min(len(small), len(large), args.problems or len(small))
    if all("logprobs" in small[i] for i in range(n)):
        got = [{"logprobs": small[i]["logprobs"], "prompt_tokens": small[i]["prompt_tokens"]} for i in range(n)]
    elif args.endpoint:
        got = traces(args.endpoint, list(humaneval_sandbox.read_problems().values())[:n], args)
    else:
        sys.exit("cascade_signal: the small row has no logprobs; give --endpoint of a serve --tiers")
    cases = [{"probs": [math.exp(lp) for lp in got[i]["logprobs"]], "prompt_tokens": got[i]["prompt_tokens"],
              "small_passed": int(bool(small[i]["passed"])), "large_passed": int(bool(large[i]["passed"])),
              "large_tokens": large[i]["completion_tokens"]} for i in range(n)]
    large_pass = sum(c["large_passed"] for c in cases)
    large_cost = sum(c["prompt_tokens"] + c["large_tokens"] for c in cases)
    both = sum(c["small_passed"] and c["large_passed"] for c in cases)
    print(f"{n} problems: small alone {sum(c['small_passed'] for c in cases)}, large alone {large_pass}, "
          f"both {both}; large alone's cost {large_cost} forward tokens")
    print("| family | rule | τ | escalated | pass@1 | % of large's passes | large forward tokens (% of large alone) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    results = []
    for family, name, t, rule in rules():
        passed, escalated, cost = score(rule, cases)
        results.append({"family": family, "rule": name, "threshold": t, "escalated": escalated,
                        "passed": passed, "cost": cost})
        print(f"| {family} | {name} | {t} | {escalated} | {passed / n:.3f} | {100 * passed / max(large_pass, 1):.1f} % "
              f"| {100 * cost / large_cost:.1f} % |")
    if args.splits:
        held_out(cases, args)
    json.dump({"problems": n, "results": results}, open("/tmp/troupe-cascade-signal.json", "w"))


if __name__ == "__main__":
    main()
