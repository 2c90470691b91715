"""HumanEval (or another workload of cascade_workloads.py) through cascade routing on a running
`troupe serve --tiers SMALL,LARGE` (ops/bench/cascade.sh starts one).

Each row sends every problem's prompt as a raw completion (a chat for GSM8K; greedy, max 384
tokens, stopped at the workload's stop strings), CONCURRENCY streams at a time, with one
routing policy:

    small, large          one tier alone
    escalate@T            the small tier writes, and hands the request to the large one
                          mid-stream when its confidence falls under T (`escalate_threshold`)
    escalate@server       the same under the server's own rule (no threshold sent: its
                          `--escalate-threshold`, or its `--escalate-budget` share)
    verify@A              the small tier drafts, the large one verifies, keeping a draft token
                          at least A times as likely as its own top one (`accept_ratio`;
                          A = 1 is exact: the output must equal the large tier's alone)
    auto                  the server's choice

and runs each completion's tests in the sandbox of humaneval_sandbox.py. The server's Stats
before and after a row give the large tier's forward tokens and steps (its cost); each Done's
`tiers` segments say whether the request escalated. Prints a markdown table, and writes the
raw results (completions, statuses, stats deltas) as JSON outside the repository.

    cascade_bench.py ENDPOINT [--workload humaneval|mbpp|gsm8k] [--problems N]
                     [--rows small,large,escalate,verify]
                     [--thresholds 0.76,0.82,0.88] [--alphas 1.0,0.5,0.2] [--concurrency 8]
                     [--max-tokens 384] [--out PATH] [--check-timeout 10] [--check-jobs N]
"""
import argparse
import json
import os
import pathlib
import sys
import threading
import time

from troupe_client import Client, TroupeError

import cascade_workloads
import humaneval_sandbox

STOPS = ["\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#"]
REPO = pathlib.Path(__file__).resolve().parents[2]
TIER_KEYS = ("requests", "escalated_in", "escalations", "tokens", "forward_tokens", "steps",
             "drafted", "accepted")


def floats(text):
    return [float(x) for x in text.split(",") if x.strip()]


def parse_rows(text, thresholds, alphas):
    """[{"name", "tier", "threshold", "alpha"}]: `escalate` and `verify` expand to every
    threshold and α; `escalate@T` and `verify@A` name one; anything else is sent as the tier
    as it is (small, large, auto, a tier's model name)."""
    rows = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        policy, _, value = word.partition("@")
        if word == "escalate@server":
            rows.append({"name": "escalate (server's rule)", "tier": "escalate", "threshold": None,
                         "alpha": None})
        elif policy == "escalate":
            for t in ([float(value)] if value else thresholds):
                rows.append({"name": f"escalate τ={t:g}", "tier": "escalate", "threshold": t,
                             "alpha": None})
        elif policy == "verify":
            for a in ([float(value)] if value else alphas):
                rows.append({"name": f"verify α={a:g}", "tier": "verify", "threshold": None,
                             "alpha": a})
        elif value:
            raise SystemExit(f"cascade_bench: only escalate and verify take @VALUE ({word})")
        else:
            rows.append({"name": word, "tier": word, "threshold": None, "alpha": None})
    for r in rows:
        if r["threshold"] is not None and not 0 < r["threshold"] < 1:
            raise SystemExit(f"cascade_bench: threshold {r['threshold']:g} not in (0, 1)")
        if r["alpha"] is not None and not 0 < r["alpha"] <= 1:
            raise SystemExit(f"cascade_bench: α {r['alpha']:g} not in (0, 1]")
    return rows


def truncate(text, stops):
    """The completion up to the first stop string (the server stops there; this only makes
    sure, whatever it does with the matched string)."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    return text[:cut]


def done_tiers(stream):
    """The Done's `tiers` segments [{"tier", "tokens"}], or None from a server without them."""
    tiers = getattr(stream, "tiers", None)
    if tiers is None and isinstance(getattr(stream, "done", None), dict):
        tiers = stream.done.get("tiers")
    if tiers is None:
        return None
    return [dict(t) if isinstance(t, dict) else {"tier": t[0], "tokens": t[1]} for t in tiers]


def request_args(row, args):
    kw = {"max_tokens": args.max_tokens, "temperature": 0, "tier": row["tier"]}  # stop: per problem
    if row["threshold"] is not None:
        kw["escalate_threshold"] = row["threshold"]
    if row["alpha"] is not None:
        kw["accept_ratio"] = row["alpha"]
    if row["name"] in ("small", "large"):
        # Each token's probability under its tier: cascade_signal.py replays escalation
        # rules on the small row's, offline. Greedy tokens do not change with it.
        kw["logprobs"] = True
    return kw


def generate_row(endpoint, problems, row, args):
    """Every problem's completion, `args.concurrency` streams at a time (one connection per
    worker: a Client is not thread-safe). Returns (records in problem order, wall seconds)."""
    records = [None] * len(problems)
    todo = iter(range(len(problems)))
    lock = threading.Lock()
    fatal = []
    kw = request_args(row, args)

    def worker():
        try:
            with Client(endpoint, timeout=args.request_timeout) as c:
                while not fatal:
                    with lock:
                        i = next(todo, None)
                    if i is None:
                        return
                    p = problems[i]
                    t0 = time.perf_counter()
                    rec = {"task_id": p["task_id"]}
                    try:
                        stops = p.get("stops", STOPS)
                        if "messages" in p:
                            s = c.chat(p["messages"], **dict(kw, stop=stops))
                        else:
                            s = c.generate(p["prompt"], **dict(kw, stop=stops))
                        s.read()
                        rec.update(completion=truncate(s.text, stops), tokens=list(s.tokens),
                                   completion_tokens=(s.usage or {}).get("completion_tokens",
                                                                         len(s.tokens)),
                                   finish_reason=s.finish_reason, tiers=done_tiers(s),
                                   prompt_tokens=s.prompt_tokens)
                        if kw.get("logprobs"):
                            rec["logprobs"] = [round(x, 5) for x in s.logprobs]
                    except TroupeError as e:
                        rec.update(completion="", tokens=[], completion_tokens=0,
                                   finish_reason="error", tiers=None, error=str(e))
                    rec["seconds"] = round(time.perf_counter() - t0, 3)
                    records[i] = rec
        except TypeError as e:  # a client without tier= / escalate_threshold= yet
            new = ", ".join(k + "=" for k in ("tier", "escalate_threshold", "accept_ratio")
                            if k in kw)
            fatal.append(f"the Python client does not take {new}? ({e})")
        except Exception as e:  # noqa: BLE001  (reported, and the run stops)
            fatal.append(f"{type(e).__name__}: {e}")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(min(args.concurrency,
                                                                   len(problems)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if fatal:
        raise SystemExit(f"cascade_bench: {row['name']}: {fatal[0]}")
    return records, wall


def stats(endpoint):
    with Client(endpoint, timeout=60) as c:
        return c.stats()


def tier_delta(before, after):
    """{tier name: {key: after - before}} from Stats' `tiers`, in the server's order
    (smallest first); None when the server reports no tiers."""
    if "tiers" not in before or "tiers" not in after:
        return None
    old = {t["name"]: t for t in before["tiers"]}
    out = {}
    for t in after["tiers"]:
        prev = old.get(t["name"], {})
        out[t["name"]] = {k: t.get(k, 0) - prev.get(k, 0) for k in TIER_KEYS if k in t}
    return out


def warm_up(endpoint, args):
    """One short request per tier, so the first row does not pay for paging weights in."""
    with Client(endpoint, timeout=args.request_timeout) as c:
        for tier in ("small", "large"):
            try:
                c.generate("def add(a, b):\n", max_tokens=8, temperature=0, tier=tier).read()
            except TroupeError as e:
                print(f"warm-up on {tier}: {e}", file=sys.stderr)
            except TypeError as e:
                raise SystemExit(f"cascade_bench: the Python client does not take tier= ({e})")


def run_row(endpoint, problems, row, args, sandbox):
    before = stats(endpoint)
    records, wall = generate_row(endpoint, problems, row, args)
    after = stats(endpoint)
    asked = [(p, r) for p, r in zip(problems, records) if "error" not in r]
    if args.workload == "humaneval":
        results = sandbox.check_many([(p, r["completion"]) for p, r in asked], args.check_jobs,
                                     args.check_timeout)
    else:
        results = [{"passed": ok, "status": "passed" if ok else "failed"}
                   for ok in (bool(p["check"](r["completion"])) for p, r in asked)]
    for (_, r), c in zip(asked, results):
        r["passed"], r["status"] = c["passed"], c["status"]
    for r in records:
        if "error" in r:
            r["passed"], r["status"] = False, "request failed"
    tiers = tier_delta(before, after)
    large = list(tiers.values())[-1] if tiers else None
    segments = [r["tiers"] for r in records if r["tiers"] is not None]
    out = dict(row)
    out.update(
        problems=len(records), passed=sum(r["passed"] for r in records),
        errors=sum("error" in r for r in records), wall_s=round(wall, 3),
        completion_tokens=sum(r["completion_tokens"] for r in records),
        escalated=sum(len(s) > 1 for s in segments) if segments else None,
        tier_names=list(tiers) if tiers else None, tiers_delta=tiers,
        large_forward_tokens=large.get("forward_tokens") if large else None,
        large_steps=large.get("steps") if large else None,
        server_delta={k: after[k] - before[k] for k in ("steps", "tokens_generated",
                                                         "engine_ms", "busy_ms")
                      if k in before and k in after},
        records=records)
    out["pass_at_1"] = out["passed"] / out["problems"]
    out["tokens_s"] = out["completion_tokens"] / wall if wall > 0 else 0.0
    return out


def share(value, base):
    if value is None:
        return "n/a"
    if not base:
        return f"{value:,}"
    return f"{value:,} ({100 * value / base:.0f} %)"


def same_completions(a, b):
    """How many of two rows' completions are identical (token ids when both have them)."""
    return sum((x["tokens"] == y["tokens"]) if x["tokens"] and y["tokens"]
               else (x["completion"] == y["completion"])
               for x, y in zip(a["records"], b["records"]))


def table(rows):
    large = next((r for r in rows if r["tier"] == "large"), None)
    lines = ["| policy | pass@1 | large-model forward tokens (% of large alone) | "
             "large-model steps (% of large alone) | wall time | tokens/s | "
             "escalated requests % |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        wall = f"{r['wall_s']:.0f} s" if r["wall_s"] >= 100 else f"{r['wall_s']:.1f} s"
        esc = ("n/a" if r["escalated"] is None
               else f"{100 * r['escalated'] / r['problems']:.0f} %")
        errors = f", {r['errors']} errors" if r["errors"] else ""
        lines.append(
            f"| {r['name']} | {r['pass_at_1']:.3f} ({r['passed']}/{r['problems']}{errors}) | "
            f"{share(r['large_forward_tokens'], large and large['large_forward_tokens'])} | "
            f"{share(r['large_steps'], large and large['large_steps'])} | {wall} | "
            f"{r['tokens_s']:.1f} | {esc} |")
    if large:
        for r in rows:
            if r["tier"] == "verify" and r["alpha"] == 1.0:
                n = same_completions(r, large)
                lines.append("")
                lines.append(f"verify α=1 against large alone: {n}/{r['problems']} completions "
                             f"identical ({'exact' if n == r['problems'] else 'NOT exact'})")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("endpoint")
    ap.add_argument("--workload", default="humaneval", choices=sorted(cascade_workloads.WORKLOADS))
    ap.add_argument("--problems", type=int, default=0, help="the first N problems (default all)")
    ap.add_argument("--rows", default="small,large,escalate,verify",
                    help="small, large, auto, escalate[@T], verify[@A], comma-separated")
    ap.add_argument("--thresholds", type=floats, default=[0.76, 0.82, 0.88],
                    help="escalate thresholds in (0, 1)")
    ap.add_argument("--alphas", type=floats, default=[1.0, 0.5, 0.2],
                    help="verify accept ratios in (0, 1]")
    ap.add_argument("--concurrency", type=int, default=8, help="streams at a time")
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("--out", help="raw results JSON (default /tmp/troupe-cascade-TIME.json; "
                                  "never inside the repository)")
    ap.add_argument("--check-timeout", type=float, default=10.0, help="wall seconds per test")
    ap.add_argument("--check-jobs", type=int, default=0, help="tests at a time (default: CPUs)")
    ap.add_argument("--request-timeout", type=float, default=3600.0,
                    help="seconds to wait for any one answer")
    ap.add_argument("--no-warmup", action="store_true")
    args = ap.parse_args()

    out = pathlib.Path(args.out or f"/tmp/troupe-cascade-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out = out.resolve()
    if out == REPO or REPO in out.parents:
        ap.error(f"--out {out} is inside the repository: HumanEval's problems and the answers "
                 f"to them stay out of it")
    rows = parse_rows(args.rows, args.thresholds, args.alphas)
    sandbox = humaneval_sandbox.Sandbox(timeout=args.check_timeout)
    if args.workload == "humaneval":
        problems = list(humaneval_sandbox.read_problems().values())
    else:
        problems = [dict(p, task_id=p["id"]) for p in cascade_workloads.load(args.workload, sandbox)]
    if args.problems:
        problems = problems[:args.problems]
    _, _, mode = sandbox.mode()
    first = stats(args.endpoint)
    names = [t["name"] for t in first.get("tiers", [])]
    print(f"== {args.workload}, {len(problems)} problems, {args.concurrency} streams, greedy, "
          f"max {args.max_tokens} tokens; tiers: {', '.join(names) or 'none reported'}",
          file=sys.stderr)
    print(f"== sandbox: {sandbox.python} -I, {mode}", file=sys.stderr)
    if not args.no_warmup:
        warm_up(args.endpoint, args)

    done = []
    for row in rows:
        r = run_row(args.endpoint, problems, row, args, sandbox)
        done.append(r)
        print(f"{r['name']}: pass@1 {r['pass_at_1']:.3f}, {r['completion_tokens']} tokens in "
              f"{r['wall_s']:.1f} s, large forward tokens {r['large_forward_tokens']}"
              f"{', %d errors' % r['errors'] if r['errors'] else ''}", file=sys.stderr)
        with open(out, "w") as f:  # after every row: a long run keeps what it has
            json.dump({"endpoint": args.endpoint, "tiers": names, "sandbox": mode,
                       "options": {k: v for k, v in vars(args).items() if k != "out"},
                       "workload": args.workload, "rows": done}, f, ensure_ascii=False)
    print(table(done))
    print(f"\nraw results: {out}")
    errors = sum(r["errors"] for r in done)
    if errors:
        first_error = next(x["error"] for r in done for x in r["records"] if "error" in x)
        print(f"{errors} requests failed (first: {first_error})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
