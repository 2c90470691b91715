"""Failover under load and a session's move, for ops/bench/scale_out.sh.

  scale_out_bench.py failover ENDPOINT N PROMPT_TOKENS GEN_TOKENS WORKER_PID
      N greedy streams (ignore_eos) on a server with two workers; once a
      quarter of their tokens are out, WORKER_PID is killed with SIGKILL.
      Prints one JSON line: whether every stream finished with all its
      tokens, how many stalled (moved to the other worker), their longest
      gap between two tokens (the failover time a client sees) against the
      streams' usual gap, and the server's per-worker counts.

  scale_out_bench.py turn ENDPOINT SESSION WORDS
      One greedy turn of session SESSION: a user message of WORDS words
      (about as many tokens) if WORDS > 0, else a short question. Prints one
      JSON line: the client's time to the first token, the server's TTFT, the
      prompt tokens and those served from cache (resident or restored pages),
      and which worker served it.
"""
import json
import os
import random
import signal
import statistics
import sys
import threading
import time

from troupe_client import Client, TroupeError

from workload import text_of


def failover(endpoint, n, n_prompt, n_gen, pid):
    rng = random.Random(3)
    prompts = [text_of(n_prompt, rng) for _ in range(n)]
    killed_at = []

    def killer():
        with Client(endpoint, timeout=60) as c:
            start = c.stats()["tokens_generated"]
            while c.stats()["tokens_generated"] - start < n * n_gen // 4:
                time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        killed_at.append(time.perf_counter())

    errors = []
    with Client(endpoint, timeout=3600) as c:
        t = threading.Thread(target=killer)
        t.start()
        streams = [c.generate(p, max_tokens=n_gen, temperature=0, ignore_eos=True) for p in prompts]
        for s in streams:
            try:
                s.read()
            except TroupeError as e:
                errors.append(str(e))
        t.join()
        stats = c.stats()
    complete = sum(1 for s in streams if s.usage and s.usage["completion_tokens"] == n_gen)
    gaps, usual = [], []
    for s in streams:
        d = [b - a for a, b in zip(s.token_times, s.token_times[1:])]
        if len(d) < 4:
            continue
        typical = statistics.median(d)
        usual.append(typical)
        if max(d) > 5 * typical and killed_at and any(a <= killed_at[0] + 5 and b >= killed_at[0]
                                                        for a, b in zip(s.token_times, s.token_times[1:])):
            gaps.append(max(d))
    print(json.dumps({
        "streams": n, "complete": complete, "errors": errors[:3],
        "moved_streams": len(gaps),
        "failover_stall_ms_max": round(1000 * max(gaps), 1) if gaps else None,
        "failover_stall_ms_p50": round(1000 * statistics.median(gaps), 1) if gaps else None,
        "usual_gap_ms": round(1000 * statistics.median(usual), 1) if usual else None,
        "workers": [{"worker": w["endpoint"].rsplit("/", 1)[-1], "up": w["up"], "requests": w["requests"],
                     "moved_in": w["moved_in"], "moved_out": w["moved_out"], "lost": w["lost"]}
                    for w in stats["workers"]]}))


def turn(endpoint, session, words):
    text = text_of(words, random.Random(5)) if words > 0 else "And in one sentence?"
    with Client(endpoint, timeout=3600) as c:
        before = {w["endpoint"]: w["requests"] for w in c.stats()["workers"]}
        t0 = time.perf_counter()
        s = c.chat([("user", text)], max_tokens=8, temperature=0, session_id=session)
        s.read()
        first = s.token_times[0] - t0 if s.token_times else None
        after = {w["endpoint"]: w["requests"] for w in c.stats()["workers"]}
    worker = [e for e in after if after[e] > before.get(e, 0)]
    print(json.dumps({"first_token_ms": round(1000 * first, 1) if first else None,
                      "server_ttft_ms": round(s.timings.get("ttft_ms", 0), 1),
                      "prompt_tokens": s.usage["prompt_tokens"], "cached_prompt_tokens": s.usage["cached_prompt_tokens"],
                      "worker": worker[0].rsplit("/", 1)[-1] if worker else None}))


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "failover":
        failover(sys.argv[2], *map(int, sys.argv[3:7]))
    elif len(sys.argv) == 5 and sys.argv[1] == "turn":
        turn(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(__doc__)
