"""Load on a running `troupe serve` through the Python client.

  serve_load.py ENDPOINT concurrent N PROMPT_TOKENS GEN_TOKENS
      N streams at once, fixed lengths (ignore_eos): aggregate decode tok/s
      (sum over streams of 1000 / per-token ms), the rate while all N decode
      (tokens arrived between the last first token and the first last one,
      the figure to set beside llama.cpp decoding N sequences in one batch),
      and the service's own cost: 1 - engine time / busy time, from the
      server's Stats.
  serve_load.py ENDPOINT poisson RATE REQUESTS SEED
      Poisson arrivals at RATE requests/s, prompts 128-1,024 tokens, outputs
      64-256 (ignore_eos): throughput, TTFT and per-token p50/p99, goodput
      (TTFT <= 5 s and <= 200 ms/token), and the live-token fraction of
      allocated KV pages sampled every 0.25 s while requests run.
One JSON line each.
"""
import json
import random
import sys
import threading
import time

from troupe_client import Client

from workload import percentile, run_poisson, summary, text_of


def service_cost(before, after):
    busy = after["busy_ms"] - before["busy_ms"]
    return round(1 - (after["engine_ms"] - before["engine_ms"]) / busy, 4) if busy > 0 else None


def all_decoding_rate(streams):
    """Tokens/s over the window in which every stream is decoding: from the
    last stream's first token to the first stream's last. No prefill runs in
    it, as in llama.cpp's batched decode figure; the per-stream aggregate
    also counts the steps that carried later streams' prefill chunks."""
    start = max(s.token_times[0] for s in streams)
    end = min(s.token_times[-1] for s in streams)
    if end <= start:
        return None
    tokens = sum(sum(1 for t in s.token_times if start < t <= end) for s in streams)
    return round(tokens / (end - start), 2)


def concurrent(endpoint, n, n_prompt, n_gen):
    """One connection carries all N streams, so the load generator itself stays light."""
    rng = random.Random(1)
    prompts = [text_of(n_prompt, rng) for _ in range(n)]
    with Client(endpoint, timeout=3600) as c:
        before = c.stats()
        t0 = time.perf_counter()
        streams = [c.generate(p, max_tokens=n_gen, temperature=0, ignore_eos=True) for p in prompts]
        for s in streams:
            s.read()
        wall = time.perf_counter() - t0
        after = c.stats()
    agg = sum(1000.0 / s.timings["per_token_ms"] for s in streams if s.timings["per_token_ms"] > 0)
    print(json.dumps({"engine": "troupe serve", "mode": "concurrent", "streams": n, "prompt_tokens": n_prompt,
                      "gen_tokens": n_gen, "aggregate_decode_tok_s": round(agg, 2),
                      "all_decoding_tok_s": all_decoding_rate(streams),
                      "output_tok_s_wall": round(sum(s.usage["completion_tokens"] for s in streams) / wall, 2),
                      "ttft_ms_p50": round(percentile([s.timings["ttft_ms"] for s in streams], 50), 1),
                      "service_cost": service_cost(before, after)}))


def poisson(endpoint, rate, n, seed):
    live = []
    stop = threading.Event()

    def sample_stats():
        with Client(endpoint, timeout=30) as c:
            while not stop.is_set():
                s = c.stats()
                if s["running"] > 0:
                    live.append(s["live_token_fraction"])
                time.sleep(0.25)

    def send(prompt, gen):
        with Client(endpoint, timeout=3600) as c:
            s = c.generate(prompt, max_tokens=gen, temperature=0, ignore_eos=True)
            s.read()
            return {"tokens": s.usage["completion_tokens"], "ttft_ms": s.timings["ttft_ms"],
                    "per_token_ms": s.timings["per_token_ms"]}

    with Client(endpoint, timeout=30) as c:
        before = c.stats()
    sampler = threading.Thread(target=sample_stats)
    sampler.start()
    results, wall = run_poisson(rate, n, seed, send)
    stop.set()
    sampler.join()
    with Client(endpoint, timeout=30) as c:
        after = c.stats()
    line = summary("troupe serve", rate, results, wall)
    line["live_token_fraction_mean"] = round(sum(live) / len(live), 4) if live else None
    line["service_cost"] = service_cost(before, after)
    print(json.dumps(line))


if __name__ == "__main__":
    endpoint, mode = sys.argv[1], sys.argv[2]
    if mode == "concurrent":
        concurrent(endpoint, *map(int, sys.argv[3:6]))
    else:
        poisson(endpoint, float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
