#!/usr/bin/env python3
"""16 concurrent greedy streams over HTTP/SSE (OpenAI completions) against
the same 16 over ZeroMQ, on one `troupe serve --http` server, alternating
rounds so both see the same machine state. Prints aggregate tokens/s and
TTFT p50 per transport and HTTP's ratio to ZeroMQ. With PEER (llama.cpp's
llama-server on the same GGUF file, idle while troupe runs and the other way
round), its rounds alternate with troupe's too, and troupe's HTTP is also
given as a ratio to it.

    http_vs_zmq.py ZMQ_ENDPOINT HTTP_HOST:PORT [STREAMS=16] [TOKENS=128] [ROUNDS=3] [PEER_HOST:PORT]
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
    if r.status != 200:
        raise SystemExit(f"{hostport}: HTTP {r.status}: {r.read()[:300]!r}")
    first, n, chunks = None, 0, 0
    for line in r:
        if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            n = chunk["usage"]["completion_tokens"]
        if chunk.get("choices"):
            chunks += 1  # a token each (the usage chunk, where a server sends one, says exactly)
            if first is None and chunk["choices"][0].get("text"):
                first = time.perf_counter() - t0
    out[i] = (first, n or chunks, time.perf_counter())


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
    peer = sys.argv[6] if len(sys.argv) > 6 else ""
    round_of(zmq_stream, endpoint, streams, 8, 99)  # warm-up
    if peer:
        round_of(http_stream, peer, streams, 8, 98)
    res = {"zmq": [], "http": []}
    if peer:
        res["peer"] = []
    for r in range(rounds):
        res["zmq"].append(round_of(zmq_stream, endpoint, streams, tokens, 3 * r))
        res["http"].append(round_of(http_stream, hostport, streams, tokens, 3 * r + 1))
        if peer:
            res["peer"].append(round_of(http_stream, peer, streams, tokens, 3 * r + 2))
    for k, v in res.items():
        print(f"{k:5s} aggregate tok/s per round: {[round(x[0], 1) for x in v]}  TTFT p50 ms: "
              f"{[round(x[1] * 1000, 1) for x in v]}")
    z = statistics.median(x[0] for x in res["zmq"])
    h = statistics.median(x[0] for x in res["http"])
    zt = statistics.median(x[1] for x in res["zmq"]) * 1000
    ht = statistics.median(x[1] for x in res["http"]) * 1000
    print(f"median: zmq {z:.1f} tok/s, http {h:.1f} tok/s, http/zmq {h / z:.3f}; "
          f"TTFT p50 zmq {zt:.1f} ms, http {ht:.1f} ms, difference {ht - zt:+.1f} ms")
    if peer:
        p = statistics.median(x[0] for x in res["peer"])
        pt = statistics.median(x[1] for x in res["peer"]) * 1000
        print(f"llama-server (same GGUF, same streams over HTTP/SSE): {p:.1f} tok/s, TTFT p50 {pt:.1f} ms; "
              f"troupe http/llama-server {h / p:.3f}, troupe zmq/llama-server {z / p:.3f}")


if __name__ == "__main__":
    main()
