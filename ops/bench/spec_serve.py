"""ops/bench/spec.sh's service phase: STREAMS concurrent greedy streams of one
chat prompt (read from FILE) through `troupe serve`, with one speculation
mode; one JSON line: aggregate decode tok/s (sum over streams of 1000 / per-
token ms), and what speculation did (from each Done).

    spec_serve.py ENDPOINT FILE STREAMS MODE TOKENS
"""
import json
import sys

from troupe_client import Client


def main():
    ep, path, n, mode, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    prompt = open(path, encoding="utf-8").read()
    with Client(ep, timeout=3600) as c:
        streams = [c.chat([("user", prompt)], max_tokens=tokens, temperature=0, speculation=mode, max_draft=8)
                   for _ in range(n)]
        for s in streams:
            s.read()
    agg = sum(1000.0 / s.timings["per_token_ms"] for s in streams if s.timings["per_token_ms"] > 0)
    drafted = sum(s.speculation["drafted"] for s in streams if s.speculation)
    accepted = sum(s.speculation["accepted"] for s in streams if s.speculation)
    windows = sum(s.speculation["windows"] for s in streams if s.speculation)
    print(json.dumps({"streams": n, "mode": mode, "aggregate_decode_tok_s": round(agg, 1),
                      "acceptance": round(accepted / drafted, 3) if drafted else None,
                      "mean_accepted_per_window": round(accepted / windows, 2) if windows else None,
                      "tokens": [s.tokens for s in streams][:1]}))


if __name__ == "__main__":
    main()
