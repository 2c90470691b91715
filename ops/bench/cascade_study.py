#!/usr/bin/env python3
"""Which signal tells a wrong small-model answer from a right one, and which rule holds on work
it was not tuned on? (issue 45; ops/bench/cascade_study.sh runs it.)

    cascade_study.py collect ENDPOINT --workloads humaneval,mbpp,gsm8k --out TRACES.json
    cascade_study.py judge TRACES.json --troupe build/troupe --model qwen2.5-coder-1.5b
    cascade_study.py analyze TRACES.json [--quality 0.95] [--hold 48]

collect: on a running `troupe serve --tiers SMALL,LARGE`, every problem of each workload is
answered greedily by the small tier alone (with each token's log-probability and its top 5) and by
the large tier alone, and each answer is checked (cascade_workloads.py). Under the hold rule an
escalated request's answer is exactly the large tier's alone, so every rule below is replayed
exactly from these two runs: a problem the rule escalates scores the large answer and costs the
large tier its prompt and answer; one it keeps scores the small answer and costs the large tier
nothing.

judge: the large model scores each small answer's first HOLD tokens in one prefill (`troupe
logits` over the prompt and the answer, re-tokenized: the traces keep text, not ids), kept in the
traces as the large model's log-probability of each held token and whether it was its own
greedy choice. What a rule that lets the large model judge a held answer would see.

analyze: signals computed from the small answer's first HOLD tokens (what the hold rule sees):

  geomean   their geometric mean probability (today's rule)
  mean      their mean probability
  min       the least probable one
  tail10    the geometric mean of the least probable 10 % (at least 2): the tail
  q25       their 25th-percentile probability
  margin    the mean gap between the top two probabilities
  entropy   the negated mean entropy of the top 5, renormalised (higher: surer)
  judge     (after `judge`) the large model's geometric mean probability of the held tokens
  agree     (after `judge`) the share of held tokens that are the large model's greedy choice
  judgetail (after `judge`) the large model's tail, as tail10 of the small model's
  short     the whole answer's length in tokens, negated (a rule would hold the whole answer)
  parses    code: the whole answer compiles as a function body; GSM8K: it ends on 'Answer: N'
  fresh     the share of the whole answer's lines that do not repeat an earlier line

For each, its separation (ROC AUC of the signal ranking wrong small answers below right ones,
per workload), the separation of them all together (a logistic regression fitted on one workload,
its AUC on each other), and two rules picked on one workload and judged on another, both directions:

  threshold  escalate when the signal is under τ; τ is the cheapest meeting QUALITY on the
             picking workload (pass@1 as a share of large alone's), then used as it is
  budget     escalate the least confident share s of the workload's own requests (the router's
             per-class quantile, at steady state); s is the cheapest meeting QUALITY on the
             picking workload

Costs are the large tier's forward tokens (prompt and answer of each escalated request) as a
share of large alone's. A judge signal also costs every request its prompt and held tokens on
the large tier (one pass; an escalated request's prompt is then cached, so it adds its answer).
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import benchlib

HOLD = 48
DEFAULT_TAU = 0.82  # serve's --escalate-threshold default under the hold rule (service/cascade.h)
SIGNALS = ("geomean", "mean", "min", "tail10", "q25", "margin", "entropy")
JUDGE_SIGNALS = ("judge", "agree", "judgetail")
WHOLE_SIGNALS = ("short", "parses", "fresh")  # of the whole answer: a rule would hold all of it


# --- collect ---------------------------------------------------------------------------------
def answer(client, problem, tier, max_tokens):
    kw = {"max_tokens": max_tokens, "temperature": 0, "tier": tier, "stop": problem["stops"]}
    if tier == "small":
        kw.update(logprobs=True, top_logprobs=5)
    if "messages" in problem:
        s = client.chat(problem["messages"], priority="batch", **kw)
    else:
        s = client.generate(problem["prompt"], priority="batch", **kw)
    s.read()
    rec = {"text": s.text, "tokens": len(s.tokens), "prompt_tokens": s.prompt_tokens,
           "finish_reason": s.finish_reason}
    if tier == "small":
        rec["logprobs"] = [round(x, 5) for x in s.logprobs]
        rec["top"] = [[round(lp, 4) for _, lp in top] for top in s.top_logprobs]
    return rec


def run_tier(endpoint, problems, tier, args):
    out = [None] * len(problems)

    def one(c, i):
        p = problems[i]
        try:
            out[i] = answer(c, p, tier, args.chat_tokens if "messages" in p else args.max_tokens)
        except Exception as e:
            raise SystemExit(f"cascade_study: {p['id']} on {tier}: {type(e).__name__}: {e}") from e

    t0 = time.perf_counter()
    benchlib.each_with_client(endpoint, len(problems), args.concurrency, one)
    return out, time.perf_counter() - t0


def limits(text):
    """--problems: N for every workload, or NAME=N,... (0 or missing: all)."""
    if "=" not in text:
        return lambda name: int(text or 0)
    table = {k: int(v) for k, v in (part.split("=") for part in text.split(",") if part)}
    return lambda name: table.get(name, 0)


def collect(args):
    """Written after each workload; a workload already in OUT (a run that stopped) is kept."""
    import cascade_workloads
    import humaneval_sandbox
    sandbox = humaneval_sandbox.Sandbox(timeout=args.check_timeout)
    result = {"hold": HOLD, "workloads": {}}
    if os.path.exists(args.out):
        with open(args.out) as f:
            result = json.load(f)
    limit = limits(args.problems)
    for name in args.workloads.split(","):
        if name in result["workloads"]:
            print(f"[cascade] {name}: kept from {args.out}", file=sys.stderr)
            continue
        problems = cascade_workloads.load(name, sandbox)
        if limit(name):
            problems = problems[:limit(name)]
        runs = {}
        for tier in ("small", "large"):
            records, wall = run_tier(args.endpoint, problems, tier, args)
            for p, r in zip(problems, records):
                r["passed"] = bool(p["check"](r["text"]))
            passed = sum(r["passed"] for r in records)
            print(f"[cascade] {name}: {tier} {passed}/{len(problems)} in {wall:.0f} s", file=sys.stderr)
            runs[tier] = records
        result["workloads"][name] = [{"id": p["id"], "small": s, "large": lg}
                                     for p, s, lg in zip(problems, runs["small"], runs["large"])]
        with open(args.out, "w") as f:
            json.dump(result, f)
    print(f"[cascade] traces: {args.out}", file=sys.stderr)


# --- judge -----------------------------------------------------------------------------------
def tokenize(args, flag, lines):
    """`troupe tokenize` of many inputs in one process: each a JSON line in, ids out."""
    out = subprocess.run([args.troupe, "tokenize", "-m", args.model, flag], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(line)["ids"] for line in out.splitlines() if line.strip()]


def prompt_ids(args, problems):
    """The ids the server gives the model: a workload is all chats (the template applied) or all
    raw prompts."""
    if "messages" in problems[0]:
        lines = [json.dumps({"messages": [{"role": r, "content": c} for r, c in p["messages"]]}) for p in problems]
        return tokenize(args, "--chat", lines)
    return tokenize(args, "--json-lines", [json.dumps(p["prompt"]) for p in problems])


def score(args, prompt, answer, scratch):
    """The large model's log-probability of each answer token after the prompt, and whether each
    is its greedy choice."""
    import numpy as np
    ids = prompt + answer
    subprocess.run([args.troupe, "logits", "-m", args.model, "--tokens", " ".join(map(str, ids)), "-o", scratch,
                    "--threads", str(args.threads)], check=True, capture_output=True)
    rows = np.fromfile(scratch, dtype=np.float32).reshape(len(ids), -1)[len(prompt) - 1:len(ids) - 1]
    rows = rows.astype(np.float64)
    top = rows.max(axis=1)
    lse = top + np.log(np.exp(rows - top[:, None]).sum(axis=1))
    picked = rows[np.arange(len(answer)), answer]
    return [round(float(x), 5) for x in picked - lse], [bool(x) for x in picked >= top]


def judge(args):
    """Written after each workload, as collect is; problems already scored are kept."""
    import cascade_workloads
    with open(args.traces) as f:
        data = json.load(f)
    scratch = os.path.join(tempfile.mkdtemp(prefix="cascade-judge-"), "logits.bin")
    try:
        for name, recs in data["workloads"].items():
            todo = [r for r in recs if "judge" not in r["small"]]
            if not todo:
                continue
            problems = {p["id"]: p for p in cascade_workloads.load(name, None)}
            prompts = prompt_ids(args, [problems[r["id"]] for r in todo])
            answers = tokenize(args, "--json-lines", [json.dumps(r["small"]["text"]) for r in todo])
            t0 = time.perf_counter()
            for r, prompt, answer in zip(todo, prompts, answers):
                held = answer[:args.hold]
                lps, agree = score(args, prompt, held, scratch) if held else ([], [])
                r["small"]["judge"] = {"logprobs": lps, "agree": agree, "retokenized": len(answer)}
            # A stop string's token is written but cut from the text.
            same = sum(r["small"]["judge"]["retokenized"] ==
                       r["small"]["tokens"] - (r["small"]["finish_reason"] == "stop_string") for r in todo)
            print(f"[cascade] {name}: {len(todo)} judged in {time.perf_counter() - t0:.0f} s; re-tokenized "
                  f"answers as long as written: {same}/{len(todo)}", file=sys.stderr)
            with open(args.traces, "w") as f:
                json.dump(data, f)
    finally:
        shutil.rmtree(os.path.dirname(scratch), ignore_errors=True)


# --- analyze ---------------------------------------------------------------------------------
def tail(lps):
    """The geometric mean probability of the least probable tenth (at least 2)."""
    probs = sorted(math.exp(x) for x in lps)
    k = max(2, len(probs) // 10)
    return math.exp(sum(math.log(max(p, 1e-30)) for p in probs[:k]) / min(k, len(probs)))


def parses(text):
    if "def " in text or text.startswith((" ", "\t")):
        try:
            compile("def _answer():\n" + text + "\n    pass\n", "<answer>", "exec")
            return 1.0
        except (SyntaxError, ValueError):
            return 0.0
    return 1.0 if re.search(r"Answer:\s*\$?\s*-?[\d,]*\.?\d+\s*$", text.strip()) else 0.0


def fresh(text):
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    return len(set(lines)) / len(lines) if lines else 1.0


def signal(small, how, hold):
    if how == "short":
        return -small["tokens"]
    if how == "parses":
        return parses(small["text"])
    if how == "fresh":
        return fresh(small["text"])
    if how in JUDGE_SIGNALS:
        j = small["judge"]
        lps = j["logprobs"][:hold]
        if not lps:
            return 1.0
        if how == "judge":
            return math.exp(sum(lps) / len(lps))
        if how == "agree":
            return sum(j["agree"][:hold]) / len(lps)
        return tail(lps)
    lps = small["logprobs"][:hold]
    if not lps:
        return 1.0
    probs = sorted(math.exp(x) for x in lps)
    if how == "geomean":
        return math.exp(sum(lps) / len(lps))
    if how == "mean":
        return sum(probs) / len(probs)
    if how == "min":
        return probs[0]
    if how == "tail10":
        return tail(lps)
    if how == "q25":
        return probs[int(0.25 * (len(probs) - 1))]
    tops = small["top"][:hold]
    if how == "margin":
        gaps = [math.exp(t[0]) - (math.exp(t[1]) if len(t) > 1 else 0.0) for t in tops if t]
        return sum(gaps) / len(gaps) if gaps else 1.0
    if how == "entropy":
        ents = []
        for t in tops:
            ps = [math.exp(x) for x in t]
            z = sum(ps)
            ents.append(-sum(p / z * math.log(p / z) for p in ps if p > 0))
        return -sum(ents) / len(ents) if ents else 0.0
    raise ValueError(how)


def cases_of(problems, hold):
    """Per problem: its signals, both tiers' results, and what escalating it costs the large tier."""
    out = []
    for p in problems:
        s, lg = p["small"], p["large"]
        keys = SIGNALS + WHOLE_SIGNALS + (JUDGE_SIGNALS if "judge" in s else ())
        prompt = lg["prompt_tokens"] or 0
        out.append({"signals": {k: signal(s, k, hold) for k in keys}, "small": s["passed"], "large": lg["passed"],
                    "cost": prompt + lg["tokens"], "answer": lg["tokens"],
                    "judging": prompt + len(s["judge"]["logprobs"][:hold]) if "judge" in s else None})
    return out


def outcome(cases, escalated, key=None):
    """(pass@1 as a share of large alone's, large forward tokens as a share, escalated share).
    A judge signal's pass is paid by every request; an escalated one then adds its answer."""
    large = sum(c["large"] for c in cases)
    passes = sum(c["large"] if e else c["small"] for c, e in zip(cases, escalated))
    if key in JUDGE_SIGNALS:
        cost = sum(c["judging"] + (c["answer"] if e else 0) for c, e in zip(cases, escalated))
    else:
        cost = sum(c["cost"] for c, e in zip(cases, escalated) if e)
    return passes / max(large, 1), cost / max(sum(c["cost"] for c in cases), 1), sum(escalated) / len(cases)


def by_threshold(cases, key, tau):
    return [c["signals"][key] < tau for c in cases]


def by_budget(cases, key, share):
    """The least confident `share` of the workload's own requests (ties kept together)."""
    k = int(round(share * len(cases)))
    order = sorted(range(len(cases)), key=lambda i: cases[i]["signals"][key])
    out = [False] * len(cases)
    for i in order[:k]:
        out[i] = True
    return out


def pick(cases, key, rule, quality):
    """The cheapest parameter meeting `quality` on these cases (the most escalating if none does)."""
    if rule == "threshold":
        params = sorted({c["signals"][key] for c in cases}) + [math.inf]
        params = [math.nextafter(v, math.inf) for v in params[:-1]] + [math.inf]
        params = [-math.inf] + params
        run = by_threshold
    else:
        params = [i / 100 for i in range(0, 101)]
        run = by_budget
    best = None
    for v in params:
        q, cost, _ = outcome(cases, run(cases, key, v), key)
        if q >= quality and (best is None or cost < best[1]):
            best = (v, cost)
    return best[0] if best else params[-1]


def auc(cases, key):
    """P(a wrong small answer's signal < a right one's), ties halved."""
    wrong = [c["signals"][key] for c in cases if not c["small"]]
    right = [c["signals"][key] for c in cases if c["small"]]
    if not wrong or not right:
        return float("nan")
    wins = sum((w < r) + 0.5 * (w == r) for w in wrong for r in right)
    return wins / (len(wrong) * len(right))


def combined_auc(train, test, keys):
    """The AUC on `test` of a logistic regression of rightness on `keys`, fitted on `train`
    (standardised by train's figures, a little L2): what the signals add up to together."""
    import numpy as np

    def features(cases):
        x = np.array([[c["signals"][k] for k in keys] for c in cases], dtype=float)
        if "short" in keys:  # a length: its logarithm
            i = keys.index("short")
            x[:, i] = np.log1p(-x[:, i])
        return x
    x, y = features(train), np.array([c["small"] for c in train], dtype=float)
    mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = np.c_[(x - mu) / sd, np.ones(len(x))]
    w = np.zeros(z.shape[1])
    for _ in range(3000):
        p = 1 / (1 + np.exp(-z @ w))
        w -= 0.5 * (z.T @ (p - y) / len(y) + 0.05 * np.r_[w[:-1], 0])
    scores = np.c_[(features(test) - mu) / sd, np.ones(len(test))] @ w
    fitted = [dict(c, signals={"combined": float(s)}) for c, s in zip(test, scores)]
    return auc(fitted, "combined")


def analyze(args):
    with open(args.traces) as f:
        data = json.load(f)
    workloads = {n: cases_of(p, args.hold) for n, p in data["workloads"].items()}
    names = list(workloads)
    print(f"### Separation (ROC AUC: a wrong small answer ranked below a right one; first {args.hold} tokens)\n")
    print("| signal | " + " | ".join(names) + " |")
    print("| --- |" + " ---: |" * len(names))
    judged = all("judge" in c["signals"] for cs in workloads.values() for c in cs)
    for key in SIGNALS + WHOLE_SIGNALS + (JUDGE_SIGNALS if judged else ()):
        print(f"| {key} | " + " | ".join(f"{auc(workloads[n], key):.3f}" for n in names) + " |")
    keys = list(SIGNALS) + ["short"]
    print(f"\nCombined ({', '.join(keys)}: a logistic regression fitted on one workload, its AUC on another)\n")
    print("| fitted on | " + " | ".join(names) + " |")
    print("| --- |" + " ---: |" * len(names))
    for a in names:
        print(f"| {a} | " + " | ".join(f"{combined_auc(workloads[a], workloads[b], keys):.3f}" for b in names) + " |")
    print("\n| workload | problems | small alone | large alone | small right, large wrong | oracle: large tokens |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for n in names:
        cs = workloads[n]
        oracle = outcome(cs, [c["large"] and not c["small"] for c in cs])
        print(f"| {n} | {len(cs)} | {sum(c['small'] for c in cs)} | {sum(c['large'] for c in cs)} | "
              f"{sum(c['small'] and not c['large'] for c in cs)} | {oracle[1]:.0%} |")
    print(f"\n### Today's default (the hold rule's geometric mean under {DEFAULT_TAU}, picked on HumanEval "
          "in an earlier run) on each workload\n")
    print("| workload | pass@1 / large | large tokens | escalated |")
    print("| --- | ---: | ---: | ---: |")
    for n in names:
        q, cost, rate = outcome(workloads[n], by_threshold(workloads[n], "geomean", DEFAULT_TAU))
        print(f"| {n} | {q:.0%} | {cost:.0%} | {rate:.0%} |")
    pairs = [(a, b) for a in names for b in names if a != b]
    print(f"\n### Rules picked on one workload, judged on another\n")
    print(f"Picked: the cheapest parameter keeping ≥ {args.quality:.0%} of large alone's pass@1 on the "
          "picking workload. Each cell: pass@1 as a share of large alone's / large-tier forward tokens as a "
          "share of large alone's / requests escalated, on the judging workload.\n")
    print("| signal | rule | " + " | ".join(f"picked: {n}" for n in names) + " | " +
          " | ".join(f"{a} → {b}" for a, b in pairs) + " |")
    print("| --- | --- |" + " ---: |" * (len(names) + len(pairs)))
    for key in (args.signals or ",".join(SIGNALS + (JUDGE_SIGNALS if judged else ()))).split(","):
        for rule in ("threshold", "budget"):
            run = by_threshold if rule == "threshold" else by_budget
            picked = {a: pick(workloads[a], key, rule, args.quality) for a in names}
            shown = [f"τ {v:.3f}" if rule == "threshold" else f"{v:.0%}" for v in picked.values()]
            cells = []
            for a, b in pairs:
                q, cost, rate = outcome(workloads[b], run(workloads[b], key, picked[a]), key)
                cells.append(f"{q:.0%} / {cost:.0%} / {rate:.0%}")
            print(f"| {key} | {rule} | " + " | ".join(shown) + " | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("endpoint")
    c.add_argument("--workloads", default="humaneval,mbpp,gsm8k")
    c.add_argument("--problems", default="0", help="the first N of each, or NAME=N,... (0: all)")
    c.add_argument("--max-tokens", type=int, default=384)
    c.add_argument("--chat-tokens", type=int, default=320)
    c.add_argument("--concurrency", type=int, default=8)
    c.add_argument("--check-timeout", type=float, default=10.0)
    c.add_argument("--out", required=True)
    j = sub.add_parser("judge")
    j.add_argument("traces")
    j.add_argument("--troupe", default="build/troupe")
    j.add_argument("--model", default="qwen2.5-coder-1.5b", help="the large tier")
    j.add_argument("--threads", type=int, default=2)
    j.add_argument("--hold", type=int, default=HOLD)
    a = sub.add_parser("analyze")
    a.add_argument("traces")
    a.add_argument("--quality", type=float, default=0.95)
    a.add_argument("--hold", type=int, default=HOLD)
    a.add_argument("--signals", default="", help="comma-separated (default: every one the traces have)")
    args = ap.parse_args()
    {"collect": collect, "judge": judge, "analyze": analyze}[args.command](args)


if __name__ == "__main__":
    main()
