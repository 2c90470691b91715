"""Failover under load, for ops/bench/scale_out.sh.

  scale_out_bench.py failover ENDPOINT N PROMPT_TOKENS GEN_TOKENS WORKER_PID
      N greedy streams (ignore_eos) on a server with two workers; once a
      quarter of their tokens are out, WORKER_PID is killed with SIGKILL.
      Prints one JSON line: whether every stream finished with all its
      tokens, how many stalled (moved to the other worker), their longest
      gap between two tokens (the failover time a client sees) against the
      streams' usual gap, and the server's per-worker counts.
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


if __name__ == "__main__":
    if len(sys.argv) != 7 or sys.argv[1] != "failover":
        sys.exit(__doc__)
    failover(sys.argv[2], *map(int, sys.argv[3:7]))
