"""The Poisson workload both servers get in ops/bench/serve.sh: for a seed,
the same arrival gaps, prompts (128-1,024 words, about one token each) and
output lengths (64-256 tokens)."""
import random

WORDS = ("the quick brown fox jumps over the lazy dog while the server streams tokens to its many clients "
         "who ask about code data and stories").split()


def text_of(n_tokens, rng):
    return " ".join(rng.choice(WORDS) for _ in range(n_tokens))


def poisson_requests(rate, n, seed):
    """[(gap_before_next_s, prompt, max_tokens)] for n requests."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = text_of(rng.randint(128, 1024), rng)
        gen = rng.randint(64, 256)
        out.append((rng.expovariate(rate), prompt, gen))
    return out


def percentile(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else 0.0


def run_poisson(rate, n, seed, send, requests=None):
    """Sends the seeded workload (or `requests`, [(gap_s, prompt, max_tokens)]),
    each request on its own thread at its arrival time. send(prompt,
    max_tokens) returns {"tokens", "ttft_ms", "per_token_ms"}.
    Returns (results in request order, wall seconds)."""
    import threading
    import time

    out = [None] * n

    def one(i, prompt, gen):
        out[i] = send(prompt, gen)

    threads = []
    t0 = time.perf_counter()
    for i, (gap, prompt, gen) in enumerate(requests or poisson_requests(rate, n, seed)):
        t = threading.Thread(target=one, args=(i, prompt, gen))
        t.start()
        threads.append(t)
        time.sleep(gap)
    for t in threads:
        t.join()
    return out, time.perf_counter() - t0


def summary(engine, rate, results, wall):
    """Throughput, TTFT and per-token p50/p99, goodput (TTFT <= 5 s and <= 200 ms/token)."""
    ttft = [r["ttft_ms"] for r in results]
    tpot = [r["per_token_ms"] for r in results]
    good = sum(1 for r in results if r["ttft_ms"] <= 5000 and r["per_token_ms"] <= 200)
    return {"engine": engine, "mode": "poisson", "rate_req_s": rate, "requests": len(results),
            "output_tok_s": round(sum(r["tokens"] for r in results) / wall, 2),
            "ttft_ms_p50": round(percentile(ttft, 50), 1), "ttft_ms_p99": round(percentile(ttft, 99), 1),
            "per_token_ms_p50": round(percentile(tpot, 50), 1), "per_token_ms_p99": round(percentile(tpot, 99), 1),
            "goodput_req_s": round(good / wall, 3), "good_fraction": round(good / len(results), 3)}
