"""ops/bench/responses.sh's measurement: a Responses chain of about 4K tokens
continued after a restart, against recomputing it.

Three turns build the chain (a document of DOC tokens, then two questions);
the server is killed (SIGKILL) and started again on the same store. Timed,
alternately, on a freshly started server each time:
  continued   the next response by previous_response_id: the chain's
              session, its prefix from the spilled KV pages;
  recomputed  the same history and question with store false: troupe copies
              the chain's messages into a one-off conversation, a full
              prefill, as a server that keeps no KV (or keeps it only in
              memory, across a restart) must do.
TTFT is the time to the first output_text delta, read by the openai
package's stream. Prints one JSON line per run and a summary line.
"""
import argparse
import json
import os
import random
import statistics
import tempfile
import time

import openai

from benchlib import Server, free_port, http_ready
from workload import text_of

QUESTION = "In one sentence, what was the document about?"


def start(args, data, port):
    return Server("troupe serve", [args.troupe, "serve", "-m", args.gguf, "--listen", f"ipc://{data}/serve.sock",
                                   "--http", f"127.0.0.1:{port}", "--threads", str(args.threads), "--kv-tokens",
                                   "16384", "--data-dir", f"{data}/store"], os.path.join(data, "serve.log"),
                  http_ready(f"127.0.0.1:{port}", "/readyz"), append=True)


def kill(server):
    server.kill()


def timed(client, model, **kw):
    """(ttft seconds, the completed response) of one streamed response."""
    t0 = time.perf_counter()
    ttft, done = None, None
    with client.responses.create(model=model, temperature=0, max_output_tokens=16, stream=True, **kw) as stream:
        for e in stream:
            if e.type == "response.output_text.delta" and ttft is None:
                ttft = time.perf_counter() - t0
            if e.type in ("response.completed", "response.incomplete"):
                done = e.response
    return ttft if ttft is not None else time.perf_counter() - t0, done


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--troupe", required=True)
    p.add_argument("--gguf", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--doc", type=int, default=3600)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--cpu", default="")
    args = p.parse_args()
    data = tempfile.mkdtemp(prefix="responses-bench-")
    port = free_port()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=3600)
    server = start(args, data, port)
    doc = text_of(args.doc, random.Random(11))
    r = client.responses.create(model=args.model, input="Read this document.\n\n" + doc + "\n\nReply with OK.",
                                temperature=0, max_output_tokens=8)
    for q in ("Name one word from the document.", "Name another word from it."):
        r = client.responses.create(model=args.model, input=q, previous_response_id=r.id, temperature=0,
                                    max_output_tokens=8)
    chain_tokens = r.usage.input_tokens + r.usage.output_tokens
    time.sleep(2)  # the last turn's pages ride the next step out; an idle server still writes them
    kill(server)
    rows = []
    for run in range(args.runs):
        for mode in ("recomputed", "continued"):
            server = start(args, data, port)
            # Both from the chain's latest response (a continued one becomes the next latest).
            ttft, done = timed(client, args.model, input=QUESTION, previous_response_id=r.id,
                               store=mode == "continued")
            if mode == "continued":
                latest = done
                time.sleep(2)
            kill(server)
            row = {"run": run, "mode": mode, "ttft_s": round(ttft, 3), "prompt_tokens": done.usage.input_tokens,
                   "cached_tokens": done.usage.input_tokens_details.cached_tokens, "text": done.output_text}
            rows.append(row)
            print(json.dumps(row), flush=True)
        r = latest
    med = {m: statistics.median(x["ttft_s"] for x in rows if x["mode"] == m) for m in ("continued", "recomputed")}
    same = all(a["text"] == b["text"] for a, b in zip(rows[::2], rows[1::2]))
    print(json.dumps({"cpu": args.cpu, "model": args.model, "chain_tokens": chain_tokens,
                      "ttft_continued_s": med["continued"], "ttft_recomputed_s": med["recomputed"],
                      "speedup": round(med["recomputed"] / med["continued"], 1), "same_answer": same}))


if __name__ == "__main__":
    main()
