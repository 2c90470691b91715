#!/usr/bin/env python3
"""16 concurrent greedy streams over HTTP/SSE (OpenAI completions) against
the same 16 over ZeroMQ, on one `troupe serve --http` server, alternating
rounds so both see the same machine state. Prints aggregate tokens/s and
TTFT p50 per transport and HTTP's ratio to ZeroMQ.

    http_vs_zmq.py ZMQ_ENDPOINT HTTP_HOST:PORT [STREAMS=16] [TOKENS=128] [ROUNDS=3]
"""
import http.client
import json
import statistics
import sys
import threading
import time

from troupe_client import Client


def zmq_stream(endpoint, prompt, tokens, out, i):
    c = Client(endpoint)
    t0 = time.perf_counter()
    s = c.generate(prompt, max_tokens=tokens, temperature=0, top_k=0, top_p=1.0, min_p=0.0, ignore_eos=True)
    first = None
    for _ in s:
        if first is None:
            first = time.perf_counter() - t0
    out[i] = (first, len(s.tokens), time.perf_counter())


def http_stream(hostport, prompt, tokens, out, i):
    host, port = hostport.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True, "ignore_eos": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first, n = None, 0
    for line in r:
        if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            n = chunk["usage"]["completion_tokens"]
        elif first is None and chunk["choices"] and chunk["choices"][0]["text"]:
            first = time.perf_counter() - t0
    out[i] = (first, n, time.perf_counter())


def round_of(fn, target, streams, tokens, salt):
    out = [None] * streams
    threads = [threading.Thread(target=fn, args=(target, f"Write a story about the number {salt * 100 + i}.", tokens,
                                                 out, i)) for i in range(streams)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = max(o[2] for o in out)
    total = sum(o[1] for o in out)
    return total / (end - t0), statistics.median(o[0] for o in out)


def main():
    endpoint, hostport = sys.argv[1], sys.argv[2]
    streams = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 128
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    round_of(zmq_stream, endpoint, streams, 8, 99)  # warm-up
    res = {"zmq": [], "http": []}
    for r in range(rounds):
        res["zmq"].append(round_of(zmq_stream, endpoint, streams, tokens, 2 * r))
        res["http"].append(round_of(http_stream, hostport, streams, tokens, 2 * r + 1))
    for k, v in res.items():
        print(f"{k:5s} aggregate tok/s per round: {[round(x[0], 1) for x in v]}  TTFT p50 ms: "
              f"{[round(x[1] * 1000, 1) for x in v]}")
    z = statistics.median(x[0] for x in res["zmq"])
    h = statistics.median(x[0] for x in res["http"])
    zt = statistics.median(x[1] for x in res["zmq"]) * 1000
    ht = statistics.median(x[1] for x in res["http"]) * 1000
    print(f"median: zmq {z:.1f} tok/s, http {h:.1f} tok/s, http/zmq {h / z:.3f}; "
          f"TTFT p50 zmq {zt:.1f} ms, http {ht:.1f} ms, difference {ht - zt:+.1f} ms")


if __name__ == "__main__":
    main()
