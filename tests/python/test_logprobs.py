#!/usr/bin/env python3
"""Logprobs on the real default model, checked against `troupe logits` (one
forward of the prompt and the answer, log-softmax in NumPy): the ZeroMQ
client's logprobs and top_logprobs at every position of a greedy answer, with
speculation off and on (a draft model; they are the target model's either way); the HTTP
chat (`logprobs`, `top_logprobs`) and completions (`logprobs: N`) endpoints
through the `openai` package, whole and streamed, equal to the ZeroMQ ones;
and out-of-range requests refused.

    test_logprobs.py TROUPE_BINARY WORK_DIR MODEL_PATH
(PYTHONPATH must hold build/python and clients/python.)
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import openai

from serving import check, free_port, start_http_server
from troupe_client import Client, TroupeError

MODEL = "qwen2.5-coder-0.5b"
PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
TOKENS = 24
TOP = 5
TOL = 2e-3  # batched and single forwards round differently in the last bits


def reference(troupe, model, work, ids):
    """log-softmax of every position's logits, from one `troupe logits` forward."""
    out = os.path.join(work, "logits.f32")
    subprocess.run([troupe, "logits", "-m", model, "--tokens", " ".join(map(str, ids)), "-o", out, "--threads", "2"],
                   check=True, capture_output=True)
    rows = np.fromfile(out, dtype=np.float32).reshape(len(ids), -1).astype(np.float64)
    m = rows.max(axis=1, keepdims=True)
    return rows - (m + np.log(np.exp(rows - m).sum(axis=1, keepdims=True)))


def check_against_reference(troupe, model, work, endpoint):
    prompt_ids = [int(x) for x in subprocess.run([troupe, "tokenize", "-m", model], input=PROMPT, capture_output=True,
                                                 text=True, check=True).stdout.split()]
    runs = {}
    with Client(endpoint) as c:
        for spec in ("off", "draft"):
            s = c.generate(PROMPT, max_tokens=TOKENS, temperature=0, logprobs=True, top_logprobs=TOP, speculation=spec)
            s.read()
            runs[spec] = s
    off, draft = runs["off"], runs["draft"]
    check(len(off.tokens) == TOKENS and len(off.logprobs) == TOKENS and len(off.top_logprobs) == TOKENS,
          f"one logprob and {TOP} top tokens per generated token")
    ref = reference(troupe, model, work, prompt_ids + off.tokens)
    worst = 0.0
    for k, (tok, lp, top) in enumerate(zip(off.tokens, off.logprobs, off.top_logprobs)):
        row = ref[len(prompt_ids) - 1 + k]
        worst = max(worst, abs(lp - row[tok]))
        want = np.argsort(-row, kind="stable")[:TOP]
        if top[0][0] != tok:
            check(False, f"position {k}: greedy's token is the most likely one")
        for (tid, tlp), w in zip(top, want):
            if tid != w and abs(row[tid] - row[w]) > TOL:
                check(False, f"position {k}: top tokens {[t for t, _ in top]} against troupe logits' {list(want)}")
            worst = max(worst, abs(tlp - row[tid]))
    check(worst < TOL, f"logprobs and top_logprobs equal troupe logits' log-softmax at every position "
                       f"(largest difference {worst:.2e})")
    check(draft.tokens == off.tokens, "speculating (a draft model), the same greedy tokens")
    diff = max(abs(a - b) for a, b in zip(draft.logprobs, off.logprobs))
    accepted = (draft.speculation or {}).get("accepted", 0)
    check(diff < TOL and accepted >= TOKENS // 4,
          f"speculating, logprobs are the target model's at drafted positions too (largest difference {diff:.2e}, "
          f"{accepted} of {TOKENS} tokens were accepted drafts)")
    return off


def check_http(port, zmq_run):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
    r = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=TOKENS, logprobs=TOP)
    lp = r.choices[0].logprobs
    check(len(lp.token_logprobs) == TOKENS and all(abs(a - b) < 1e-5 for a, b in zip(lp.token_logprobs, zmq_run.logprobs)),
          "completions logprobs: N gives the ZeroMQ logprobs")
    check(all(len(t) == TOP for t in lp.top_logprobs) and "".join(lp.tokens) == r.choices[0].text
          and lp.text_offset[0] == 0, "completions: tokens join to the text, N top tokens each, text_offset")

    msgs = [{"role": "user", "content": "Name three prime numbers."}]
    whole = client.chat.completions.create(model=MODEL, messages=msgs, temperature=0, max_tokens=16, logprobs=True,
                                           top_logprobs=3)
    content = whole.choices[0].logprobs.content
    check(len(content) == whole.usage.completion_tokens and all(len(e.top_logprobs) == 3 for e in content)
          and all(e.top_logprobs[0].logprob >= e.top_logprobs[-1].logprob for e in content),
          "chat logprobs: one entry per token, 3 top tokens each, most likely first")
    check("".join(bytes(e.bytes).decode("utf-8", "replace") for e in content) == whole.choices[0].message.content,
          "chat logprobs: the tokens' bytes join to the answer")
    with Client(f"ipc://{os.environ['TROUPE_TEST_ENDPOINT']}") as c:
        s = c.chat(msgs, max_tokens=16, temperature=0, logprobs=True, top_logprobs=3)
        s.read()
    check(all(abs(e.logprob - b) < 1e-5 for e, b in zip(content, s.logprobs)), "chat logprobs equal the ZeroMQ chat's")
    stream = client.chat.completions.create(model=MODEL, messages=msgs, temperature=0, max_tokens=16, logprobs=True,
                                            top_logprobs=3, stream=True)
    streamed = [e for ch in stream if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    check([(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content],
          "streamed chat logprobs are the whole answer's, chunk by chunk")
    for bad, says in (({"top_logprobs": 21, "logprobs": True}, "top_logprobs"), ({"top_logprobs": 2}, "logprobs")):
        try:
            client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=4, **bad)
            check(False, f"{bad} is refused")
        except openai.BadRequestError as e:
            check(says in str(e), f"{bad}: 400 ({e.message})")


def main():
    troupe, work, model = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    data = tempfile.mkdtemp(prefix="logprobs-", dir=work)
    port = free_port()
    os.environ["TROUPE_TEST_ENDPOINT"] = f"{data}/serve.sock"
    endpoint = f"ipc://{data}/serve.sock"
    server = start_http_server([troupe, "serve", "-m", model, "--listen", endpoint, "--http", f"127.0.0.1:{port}",
                                "--threads", "2", "--kv-tokens", "16384", "--draft-model", model,
                                "--data-dir", f"{data}/store"],
                               port, os.path.join(work, "logprobs-serve.log"), wait_s=180)
    try:
        zmq_run = check_against_reference(troupe, model, work, endpoint)
        check_http(port, zmq_run)
        with Client(endpoint) as c:
            try:
                c.generate("x", max_tokens=2, top_logprobs=3).read()
                check(False, "top_logprobs without logprobs is refused")
            except TroupeError as e:
                check(e.code == "invalid_field" and "top_logprobs" in e.message, f"ZeroMQ: {e}")
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
