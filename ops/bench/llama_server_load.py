"""The same Poisson workload (ops/bench/workload.py) on llama-cpp-python's
OpenAI-compatible server (`python -m llama_cpp.server`), streamed over SSE:
greedy, end-of-generation tokens suppressed by logit_bias (troupe's runs use
ignore_eos), so both servers produce the same lengths. One JSON line.

usage: llama_server_load.py URL RATE REQUESTS SEED EOS_IDS(comma-separated)
"""
import json
import sys
import time
import urllib.request

from workload import run_poisson, summary


def run_one(url, prompt, gen, bias):
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
    return {"tokens": n, "ttft_ms": 1000 * ((first or time.perf_counter()) - t0),
              "per_token_ms": 1000 * (last - first) / (n - 1) if n > 1 else 0.0}


def main():
    url, rate, n, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    bias = {tok: -100.0 for tok in sys.argv[5].split(",") if tok}
    results, wall = run_poisson(rate, n, seed, lambda prompt, gen: run_one(url, prompt, gen, bias))
    print(json.dumps(summary("llama-cpp-python server", rate, results, wall)))


if __name__ == "__main__":
    main()
