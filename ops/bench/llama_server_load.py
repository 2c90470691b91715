"""The same Poisson workload (ops/bench/workload.py) on llama-cpp-python's
OpenAI-compatible server (`python -m llama_cpp.server`), streamed over SSE:
greedy, end-of-generation tokens suppressed by logit_bias (troupe's runs use
ignore_eos), so both servers produce the same lengths. One JSON line.

usage: llama_server_load.py URL RATE REQUESTS SEED EOS_IDS(comma-separated)
"""
import json
import sys
import threading
import time
import urllib.request

from workload import percentile, poisson_requests


def run_one(url, prompt, gen, bias, out, i):
    body = json.dumps({"prompt": prompt, "max_tokens": gen, "temperature": 0, "stream": True,
                       "logit_bias": bias}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = last = None
    n = 0
    with urllib.request.urlopen(req, timeout=3600) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if chunk["choices"][0].get("text"):
                now = time.perf_counter()
                first = first or now
                last = now
                n += 1
    out[i] = {"tokens": n, "ttft_ms": 1000 * ((first or time.perf_counter()) - t0),
              "per_token_ms": 1000 * (last - first) / (n - 1) if n > 1 else 0.0}


def main():
    url, rate, n, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    bias = {tok: -100.0 for tok in sys.argv[5].split(",") if tok}
    out = [None] * n
    threads = []
    t0 = time.perf_counter()
    for i, (gap, prompt, gen) in enumerate(poisson_requests(rate, n, seed)):
        t = threading.Thread(target=run_one, args=(url, prompt, gen, bias, out, i))
        t.start()
        threads.append(t)
        time.sleep(gap)
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttft = [r["ttft_ms"] for r in out]
    tpot = [r["per_token_ms"] for r in out]
    good = sum(1 for r in out if r["ttft_ms"] <= 5000 and r["per_token_ms"] <= 200)
    print(json.dumps({"engine": "llama-cpp-python server", "mode": "poisson", "rate_req_s": rate, "requests": n,
                      "output_tok_s": round(sum(r["tokens"] for r in out) / wall, 2),
                      "ttft_ms_p50": round(percentile(ttft, 50), 1), "ttft_ms_p99": round(percentile(ttft, 99), 1),
                      "per_token_ms_p50": round(percentile(tpot, 50), 1),
                      "per_token_ms_p99": round(percentile(tpot, 99), 1),
                      "goodput_req_s": round(good / wall, 3), "good_fraction": round(good / n, 3)}))


if __name__ == "__main__":
    main()
