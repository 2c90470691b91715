"""Phases of ops/bench/long.sh against a running `troupe serve`.

  long_bench.py EP session TURNS     one chat session of TURNS turns under the window policy
                                     (the server runs at --context 1024): TTFT p50/p99 per
                                     quarter of the run, and how much of each prompt was cached
  long_bench.py EP documents FOLDER  every *.txt of FOLDER as one batch job: when each summary
                                     finished, seconds per summary, the job's wall time
"""
import os
import sys
import time

from troupe_client import Client

from workload import percentile

TEMPLATE = ("Summarize the following document in three or four sentences for a busy engineer: what it is "
            "about, and what a reader must know.\n\n{item}")


def turn_text(t):
    # About 40 tokens a turn with distinct content, so no two turns are alike.
    return (f"Turn {t}: note that item {t} costs {t * 7 % 97} coins and ships to city number {t * 13 % 41}. "
            f"Please confirm item {t} briefly.")


def session(ep, turns):
    rows = []
    with Client(ep, timeout=600) as c:
        for t in range(turns):
            s = c.chat([("user", turn_text(t))], max_tokens=24, temperature=0, session_id="long",
                       context_policy="window")
            s.read()
            rows.append((s.timings["ttft_ms"], s.usage["prompt_tokens"], s.usage["cached_prompt_tokens"]))
        states = c.show_session("long")["turn_states"]
        shifted = c.stats()["tokens_shifted"]
    quarter = max(1, turns // 4)
    print("| turns | TTFT p50 ms | TTFT p99 ms | p99 / p50 | prompt tokens (mean) | cached (mean) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for q in range(0, turns, quarter):
        part = rows[q:q + quarter]
        ttft = [r[0] for r in part]
        p50, p99 = percentile(ttft, 50), percentile(ttft, 99)
        print(f"| {q + 1}-{q + len(part)} | {p50:.1f} | {p99:.1f} | {p99 / p50:.2f} | "
              f"{sum(r[1] for r in part) / len(part):.0f} | {sum(r[2] for r in part) / len(part):.0f} |")
    ttft = [r[0] for r in rows]
    p50, p99 = percentile(ttft, 50), percentile(ttft, 99)
    print(f"all {turns} turns: TTFT p50 {p50:.1f} ms, p99 {p99:.1f} ms (p99/p50 {p99 / p50:.2f}); "
          f"{states.count('window')} turns in the window, {states.count('archived')} archived; "
          f"{shifted} tokens shifted instead of prefilled")


def documents(ep, folder):
    names = sorted(n for n in os.listdir(folder) if n.endswith(".txt"))
    items = [open(os.path.join(folder, n), encoding="utf-8").read() for n in names]
    with Client(ep, timeout=3600) as c:
        start = time.monotonic()
        job = c.submit_job(items, TEMPLATE, max_tokens=160, temperature=0)
        finished_at = []
        while job["state"] == "running":
            time.sleep(0.5)
            job = c.job_status(job["job_id"])
            while len(finished_at) < job["finished_items"]:
                finished_at.append(time.monotonic() - start)
        wall = time.monotonic() - start
        results = c.job_results(job["job_id"])
    print("| document | prompt tokens | summary tokens | finish |")
    print("| --- | --- | --- | --- |")
    for n, r in zip(names, results):
        print(f"| {n} | {r['prompt_tokens']} | {r['completion_tokens']} | {r['finish_reason'] or r['error']} |")
    prompt = sum(r["prompt_tokens"] for r in results)
    done = ", ".join(f"{t:.0f}" for t in finished_at)
    print(f"job {job['state']}: {len(items)} documents, {prompt} prompt tokens, wall {wall:.0f} s, "
          f"{wall / len(items):.1f} s a summary ({prompt / wall:.0f} prompt tok/s); finished at {done} s")
    for n, r in zip(names, results):
        print(f"--- {n}\n{r['text'].strip()}")


def main():
    ep, phase, arg = sys.argv[1], sys.argv[2], sys.argv[3]
    if phase == "session":
        session(ep, int(arg))
    elif phase == "documents":
        documents(ep, arg)
    else:
        sys.exit(f"unknown phase {phase}")


if __name__ == "__main__":
    main()
