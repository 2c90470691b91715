"""Phases of ops/bench/sessions.sh against a running `troupe serve` (the
shell script starts, kills and restarts the servers between phases). One
JSON line each.

  sessions_bench.py EP first N          turn 1 of session "bench": an N-token message; waits until its pages are spilled
  sessions_bench.py EP resume FILE      turn 2 (after a restart: from restored pages); saves the conversation to FILE
  sessions_bench.py EP recompute FILE   the same conversation as one request on a server that stores no KV: full prefill
  sessions_bench.py EP latency RATE N SEED [ITEMS]
                                        interactive Poisson load (prompts 64-256 tokens, 32 out); with ITEMS, a
                                        batch job of that many 256-token summaries runs alongside
"""
import json
import random
import sys
import time

from troupe_client import Client

from workload import percentile, run_poisson, text_of

QUESTION = "In one sentence, what was that about?"


def first(ep, n):
    text = text_of(n, random.Random(5))
    with Client(ep, timeout=3600) as c:
        s = c.chat([("user", text)], max_tokens=16, temperature=0, session_id="bench")
        s.read()
        want = s.usage["prompt_tokens"] // 16  # full pages of the prompt at least
        deadline = time.time() + 120
        while c.stats()["pages_spilled"] < want and time.time() < deadline:
            time.sleep(0.1)
        print(json.dumps({"phase": "first", "prompt_tokens": s.usage["prompt_tokens"], "ttft_ms": s.timings["ttft_ms"],
                          "pages_spilled": c.stats()["pages_spilled"]}))


def resume(ep, path):
    with Client(ep, timeout=3600) as c:
        history = c.show_session("bench")["messages"]
        s = c.chat([("user", QUESTION)], max_tokens=16, temperature=0, session_id="bench")
        s.read()
        json.dump({"history": history, "tokens": s.tokens}, open(path, "w"))
        st = c.stats()
        print(json.dumps({"phase": "restored", "prompt_tokens": s.usage["prompt_tokens"],
                          "cached_prompt_tokens": s.usage["cached_prompt_tokens"], "ttft_ms": s.timings["ttft_ms"],
                          "pages_restored": st["pages_restored"]}))


def recompute(ep, path):
    saved = json.load(open(path))
    with Client(ep, timeout=3600) as c:
        s = c.chat([tuple(m) for m in saved["history"]] + [("user", QUESTION)], max_tokens=16, temperature=0)
        s.read()
        print(json.dumps({"phase": "recomputed", "prompt_tokens": s.usage["prompt_tokens"],
                          "cached_prompt_tokens": s.usage["cached_prompt_tokens"], "ttft_ms": s.timings["ttft_ms"],
                          "same_tokens": s.tokens == saved["tokens"]}))


def latency(ep, rate, n, seed, items):
    job = None
    if items:
        rng = random.Random(11)
        with Client(ep, timeout=60) as c:
            job = c.submit_job([text_of(256, rng) for _ in range(items)], "Summarize: {item}", max_tokens=64,
                               temperature=0)["job_id"]
        time.sleep(2)  # let the job fill its slots

    def send(prompt, gen):
        with Client(ep, timeout=3600) as c:
            s = c.generate(prompt, max_tokens=32, temperature=0, ignore_eos=True, priority="interactive")
            s.read()
            return {"tokens": s.usage["completion_tokens"], "ttft_ms": s.timings["ttft_ms"],
                    "per_token_ms": s.timings["per_token_ms"]}

    rng = random.Random(seed)
    reqs = [(rng.expovariate(rate), text_of(rng.randint(64, 256), rng), 32) for _ in range(n)]
    results, wall = run_poisson(rate, n, seed, send, reqs)
    done_items = 0
    if job:
        with Client(ep, timeout=60) as c:
            done_items = c.job_status(job)["finished_items"]
            c.cancel_job(job)
    ttft = [r["ttft_ms"] for r in results]
    tpot = [r["per_token_ms"] for r in results]
    print(json.dumps({"phase": "latency", "job_items": items, "job_items_done_meanwhile": done_items,
                      "requests": n, "ttft_ms_p50": round(percentile(ttft, 50), 1),
                      "ttft_ms_p99": round(percentile(ttft, 99), 1), "per_token_ms_p50": round(percentile(tpot, 50), 1),
                      "per_token_ms_p99": round(percentile(tpot, 99), 1), "wall_s": round(wall, 1)}))


if __name__ == "__main__":
    ep, phase = sys.argv[1], sys.argv[2]
    if phase == "first":
        first(ep, int(sys.argv[3]))
    elif phase == "resume":
        resume(ep, sys.argv[3])
    elif phase == "recompute":
        recompute(ep, sys.argv[3])
    elif phase == "latency":
        latency(ep, float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]) if len(sys.argv) > 6 else 0)
    else:
        sys.exit(__doc__)
